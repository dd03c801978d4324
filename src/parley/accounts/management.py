"""What admins do to users (the admin console's routes and the CLI): find them, change
their tier or role, disable them, end their sessions, revoke their keys. Every change is
recorded in the audit log in the transaction that makes it, with who made it and why (the
``rule``: an admin's hand, the CLI, an identity provider's claim); a user disabled, or
whose sessions or keys end, is refused on their next request (this process's credential
cache is emptied for them at once; another process's within ``auth_cache_seconds``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.audit.log import AuditLog
from parley.domain import UserRole, utcnow
from parley.errors import Conflict, InvalidRequest, no_such
from parley.store import credentials, users
from parley.store.database import Database
from parley.store.schema import User


@dataclass(frozen=True, slots=True)
class UserChange:
    tier: str | None = None
    role: UserRole | None = None
    disabled: bool | None = None


class LastAdmin(Conflict):
    code = "last_admin"


class Management:
    def __init__(
        self,
        db: Database,
        audit: AuditLog,
        tiers: list[str],
        forget: Callable[[str], None] = lambda _: None,
    ) -> None:
        """``forget``: this process's cached credentials of a user, dropped (the API's)."""
        self._db = db
        self._audit = audit
        self._tiers = tiers
        self.db = db
        self.audit = audit
        self._forget = forget

    async def find(self, query: str | None, limit: int, after: str | None) -> list[User]:
        async with self._db.transaction() as s:
            return await users.search_users(s, query=query, limit=limit, after=after)

    async def get(self, user_id: str) -> User:
        async with self._db.transaction() as s:
            return await _user(s, user_id)

    async def change(self, actor: Actor, user_id: str, change: UserChange, rule: str) -> User:
        """The user's tier, role or state changed, each change on the record."""
        async with self._db.transaction() as s:
            user = await self.change_in(s, actor, user_id, change, rule)
        self._forget(user_id)
        return user

    async def change_in(
        self,
        s: AsyncSession,
        actor: Actor,
        user_id: str,
        change: UserChange,
        rule: str,
        *,
        keep_an_admin: bool = True,
    ) -> User:
        """``change`` in the caller's transaction (who then calls ``forget``)."""
        if change.tier is not None and change.tier not in self._tiers:
            raise InvalidRequest(
                f"there is no tier {change.tier!r} (tiers: {', '.join(self._tiers)})",
                param="tier",
            )
        user = await _user(s, user_id)
        if keep_an_admin and user.role == UserRole.ADMIN and _demotes(change):
            await _not_last_admin(s, user)
        for action, detail in _applied(user, change):
            await self._record(s, actor, action, user, {**detail, "rule": rule})
        if change.disabled:
            await credentials.revoke_sessions(s, user_id=user.id)
        user.updated_at = utcnow()
        return user

    async def deprovision_in(self, s: AsyncSession, actor: Actor, user_id: str, rule: str) -> None:
        """An identity provider removed the user: disabled (even the last admin: the CLI
        makes another), every session and key ended, in the caller's transaction."""
        user = await self.change_in(
            s, actor, user_id, UserChange(disabled=True), rule, keep_an_admin=False
        )
        revoked = await credentials.revoke_api_keys(s, user_id=user.id)
        if revoked:
            await self._record(s, actor, AuditAction.KEYS_REVOKED, user, {"revoked": revoked})

    def forget(self, user_id: str) -> None:
        """This process's cached credentials of the user dropped (after a commit)."""
        self._forget(user_id)

    async def end_sessions(self, actor: Actor, user_id: str) -> int:
        async with self._db.transaction() as s:
            user = await _user(s, user_id)
            ended = await credentials.revoke_sessions(s, user_id=user.id)
            await self._record(s, actor, AuditAction.SESSIONS_ENDED, user, {"ended": ended})
        self._forget(user_id)
        return ended

    async def revoke_keys(self, actor: Actor, user_id: str) -> int:
        async with self._db.transaction() as s:
            user = await _user(s, user_id)
            revoked = await credentials.revoke_api_keys(s, user_id=user.id)
            await self._record(s, actor, AuditAction.KEYS_REVOKED, user, {"revoked": revoked})
        self._forget(user_id)
        return revoked

    async def _record(
        self, s: AsyncSession, actor: Actor, action: AuditAction, user: User, detail: dict[str, Any]
    ) -> None:
        await self._audit.record_in(s, about_user(action, actor, user, detail))


def about_user(action: AuditAction, actor: Actor, user: User, detail: dict[str, Any]) -> AuditEvent:
    """An event about a user (the target), their email kept with it: every account change's."""
    return AuditEvent(action, actor, "user", user.id, {"email": user.email, **detail})


def _applied(user: User, change: UserChange) -> list[tuple[AuditAction, dict[str, Any]]]:
    """The change made to the row: what each part of it was and became (none: unchanged)."""
    done: list[tuple[AuditAction, dict[str, Any]]] = []
    if change.tier is not None and change.tier != user.tier:
        done.append((AuditAction.TIER_CHANGED, {"from": user.tier, "to": change.tier}))
        user.tier = change.tier
    if change.role is not None and change.role.value != user.role:
        done.append((AuditAction.ROLE_CHANGED, {"from": user.role, "to": change.role.value}))
        user.role = change.role.value
    if change.disabled is not None and change.disabled != (user.disabled_at is not None):
        user.disabled_at = utcnow() if change.disabled else None
        done.append(
            (AuditAction.USER_DISABLED if change.disabled else AuditAction.USER_ENABLED, {})
        )
    return done


def _demotes(change: UserChange) -> bool:
    return bool(change.disabled) or (change.role is not None and change.role != UserRole.ADMIN)


async def _not_last_admin(s: AsyncSession, user: User) -> None:
    """An admin cannot remove the last admin who can still sign in."""
    if await users.count_admins(s, excluding=user.id) == 0:
        raise LastAdmin(
            "that is the last admin: make another admin first (parley user set-role)",
            param="role",
        )


async def _user(s: AsyncSession, user_id: str) -> User:
    user = await users.get_user(s, user_id)
    if user is None:
        raise no_such("user", user_id, code="user_not_found", param="user_id")
    return user
