"""What a SCIM push does to parley accounts, in the push's own transaction: a User makes
(or, where the operator allows, takes over) an account whose sign-in name is its primary
email (else its userName); its email, password and ``active`` follow; ``active: false`` or
a DELETE deprovisions it at once (disabled, every session and key ended, even the last
admin: the CLI makes another). After the commit, ``settle`` applies the operator's rules
to the tier and role of every user whose groups or ``userType`` a push touched, and drops
this process's cached credentials of them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from scim2_models import Resource, UniquenessException
from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts.claim_rules import apply_rules
from parley.accounts.management import Management, UserChange, about_user
from parley.audit.actions import Actor, AuditAction
from parley.scim.resources import USER
from parley.scim.settings import OnDelete, ScimSettings
from parley.store import credentials, scim, users
from parley.store.schema import User
from parley.store.scim import ScimResource

SOURCE = "scim"
ACTOR = Actor(None, SOURCE)


class ScimAccounts(Protocol):
    """What provisioning needs of ``accounts.service.Accounts``."""

    async def create_sso_user(self, s: AsyncSession, email: str, provider: str) -> User: ...

    async def hash_password(self, password: str) -> str: ...


@dataclass
class Pending:
    """One push's users to settle after its commit."""

    users: set[str] = field(default_factory=set)
    erase: set[str] = field(default_factory=set)


class Provisioning:
    def __init__(
        self,
        settings: ScimSettings,
        manage: Management,
        accounts: ScimAccounts,
        default_tier: str,
        erase: Callable[[str], Awaitable[None]],
    ) -> None:
        """``erase``: a user's account and everything of it deleted (``on_delete: delete``)."""
        self._settings = settings
        self._manage = manage
        self._accounts = accounts
        self._default_tier = default_tier
        self._erase = erase
        self._db = manage.db

    async def written(
        self,
        s: AsyncSession,
        row: ScimResource,
        resource: Resource[Any],
        previous: dict[str, Any] | None,
        pending: Pending,
    ) -> None:
        if row.kind != USER:
            return
        user = await self._account(s, row)
        password = getattr(resource, "password", None)
        if password:
            user.password_hash = await self._accounts.hash_password(str(password))
            await credentials.revoke_sessions(s, user_id=user.id)
            await self._record(s, AuditAction.PASSWORD_CHANGED, user, {})
        active = row.body.get("active")
        if previous is None or previous.get("active") != active:
            await self._activate(s, user, active)
        pending.users.add(user.id)

    async def members_changed(self, s: AsyncSession, touched: set[str], pending: Pending) -> None:
        for member_id in touched:
            member = await s.get(ScimResource, member_id)
            if member is not None and member.user_id is not None:
                pending.users.add(member.user_id)

    async def deleted(self, s: AsyncSession, row: ScimResource, pending: Pending) -> None:
        if row.kind != USER:
            await self.members_changed(s, {m.id for m in await scim.members(s, row.id)}, pending)
            return
        if row.user_id is None:
            return
        await self._manage.deprovision_in(s, ACTOR, row.user_id, "scim:deleted")
        pending.users.add(row.user_id)
        if self._settings.on_delete == OnDelete.DELETE:
            pending.erase.add(row.user_id)

    async def settle(self, pending: Pending) -> None:
        """After the commit: cached credentials dropped, rules applied, erasures done."""
        for user_id in pending.users:
            self._manage.forget(user_id)
        for user_id in pending.erase:
            await self._erase(user_id)
        for user_id in pending.users - pending.erase:
            if self._settings.rules:
                claims = await self.claims(user_id)
                await apply_rules(
                    self._manage, SOURCE, user_id, self._settings.rules, claims, self._default_tier
                )

    async def claims(self, user_id: str) -> dict[str, Any]:
        """What the rules read: the display names of the user's groups, its ``userType``."""
        async with self._db.transaction() as s:
            row = await scim.of_user(s, user_id)
            if row is None:
                return {"groups": []}
            groups = [str(g.body.get("displayName", "")) for g in await scim.groups_of(s, row.id)]
            return {"groups": groups, "userType": row.body.get("userType")}

    async def _account(self, s: AsyncSession, row: ScimResource) -> User:
        """The row's account, made or taken over on its first push; its email follows."""
        email = users.normalize_email(sign_in_name(row.body))
        holder = await users.find_user_by_email(s, email)
        if row.user_id is not None:
            user = await users.get_user(s, row.user_id)
            assert user is not None  # the row is deleted with the account
            if holder is not None and holder.id != user.id:
                raise UniquenessException(detail=f"another account has the email {email!r}")
            if user.email != email:
                detail = {"from": user.email, "to": email}
                user.email = email
                await self._record(s, AuditAction.EMAIL_CHANGED, user, detail)
            return user
        if holder is not None:
            if not self._settings.link_existing_email or await scim.of_user(s, holder.id):
                raise UniquenessException(detail=f"an account with the email {email!r} exists")
            row.user_id = holder.id
            await self._record(s, AuditAction.USER_LINKED, holder, {"scim_id": row.id})
            return holder
        user = await self._accounts.create_sso_user(s, email, SOURCE)
        row.user_id = user.id
        return user

    async def _activate(self, s: AsyncSession, user: User, active: object) -> None:
        if active is False and user.disabled_at is None:
            await self._manage.deprovision_in(s, ACTOR, user.id, "scim:active=false")
        elif active is not False and user.disabled_at is not None:
            change = UserChange(disabled=False)
            await self._manage.change_in(s, ACTOR, user.id, change, "scim:active=true")

    async def _record(
        self, s: AsyncSession, action: AuditAction, user: User, detail: dict[str, Any]
    ) -> None:
        await self._manage.audit.record_in(s, about_user(action, ACTOR, user, detail))


def sign_in_name(body: dict[str, Any]) -> str:
    """A provisioned account's sign-in name: its primary email, else its first, else its
    userName (what an OpenID Connect sign-in with the same email links to)."""
    emails = [e for e in body.get("emails") or [] if isinstance(e, dict) and e.get("value")]
    primary = next((e for e in emails if e.get("primary") is True), None)
    chosen = primary or (emails[0] if emails else None)
    return str(chosen["value"] if chosen else body.get("userName", ""))
