"""A way back into an account whose password is forgotten.

By mail (when ``[mail]`` is set): a request for an email always answers alike — throttled
per address and per email, refused for everyone alike when the mail server does not answer
(503: try again later), else one outbox row, whatever the email; so neither the answer nor
its time tells whether an account exists. The outbox's delivery composes the mail: a
single-use link (``/#reset=<token>``, only its hash stored, expiring in
``reset_link_minutes``) for an account with a password; for one that signs in through an
identity provider, a mail saying so; nothing for no account. Without mail: an admin makes
the same link to hand over (console), or the operator sets the password (CLI, from
standard input). Setting it applies the password rules, spends the account's other links,
ends every session and is audited; the user is signed in and told by mail."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts.login import SSO_ONLY, Login
from parley.accounts.management import about_user
from parley.accounts.passwords import Passwords
from parley.accounts.policy import check_password
from parley.accounts.settings import AccountSettings
from parley.accounts.throttle import AccountThrottles
from parley.accounts.tokens import hash_token
from parley.audit.actions import Actor, AuditAction
from parley.audit.log import AuditLog
from parley.domain import utcnow
from parley.errors import (
    Conflict,
    DependencyUnavailable,
    InvalidRequest,
    Unauthenticated,
    no_such,
)
from parley.mail.outbox import Letter, Outbox
from parley.store import account_tokens, credentials, identities, mail_outbox, users
from parley.store.database import Database
from parley.store.mail_outbox import OutboxMail
from parley.store.schema import User

RESET = "reset"
CONFIRM = "confirm"
CONFIRM_HOURS = 24
CHANGED = (
    "The password of your parley account was just changed, and its other sessions signed "
    "out.\nIf it was not you, reset it now or tell your administrator."
)


UNCONFIRMED = "confirm your email first: follow the link we mailed you (or ask for another)"


class Unconfirmed(Unauthenticated):
    code = "email_unconfirmed"


class MailOff(Conflict):
    code = "mail_not_configured"


class MailUnavailable(DependencyUnavailable):
    code = "mail_unavailable"


class NoPassword(Conflict):
    code = "no_password"


class LinkRefused(InvalidRequest):
    code = "invalid_reset_link"


class SessionOpener(Protocol):
    async def open_sso_session(self, user_id: str, provider: str) -> Login: ...

    def forget_credentials(self, user_id: str) -> None: ...


class Recovery:
    def __init__(
        self,
        db: Database,
        settings: AccountSettings,
        outbox: Outbox | None,
        throttles: AccountThrottles | None,
        passwords: Passwords,
        audit: AuditLog,
        sessions: SessionOpener | None,
    ) -> None:
        """``throttles`` and ``sessions``: None for the CLI (it only sets passwords)."""
        self._db = db
        self._settings = settings
        self.outbox = outbox
        self._throttles = throttles
        self._passwords = passwords
        self._audit = audit
        self._sessions = sessions

    async def request(self, email: str, client: str | None, base: str) -> None:
        """A reset link asked for ``email``: the same work whether it is an account's."""
        await self._ready_to_mail(email, client)
        async with self._db.transaction() as s:
            address = users.normalize_email(email)
            await mail_outbox.add(s, "reset_request", address, {"base": base})

    async def _ready_to_mail(self, email: str, client: str | None) -> None:
        """Mail is set up, its server answers, and this ask is within the throttles."""
        if self.outbox is None or self._throttles is None:
            raise MailOff("mail is not set up here: ask your administrator")
        if not await self.outbox.smtp.reachable():  # refused before it counts
            raise MailUnavailable(
                "mail cannot be sent right now: try again in a few minutes", retry_after=60
            )
        await self._throttles.before_reset_request(email, client)

    async def compose(self, mail: OutboxMail) -> Letter | None:
        """The outbox's mail written now (None: nothing to send)."""
        if mail.kind == "notice":
            return Letter(mail.address, mail.payload["subject"], mail.payload["body"])
        if mail.kind == "confirm":
            return await self._confirm_letter(mail)
        if mail.kind != "reset_request":
            return None
        async with self._db.transaction() as s:
            user = await users.find_user_by_email(s, mail.address)
            if user is None or user.disabled_at is not None:
                return None
            base = str(mail.payload["base"])
            if user.password_hash == SSO_ONLY:
                return await self._no_password_letter(s, user, base)
            token, _ = await self._new_link(s, user, "mail")
        minutes = self._settings.reset_link_minutes
        body = (
            f"Someone (we hope you) asked to reset the password of {user.email} on parley.\n\n"
            f"Choose a new one here, within {minutes} minutes; the link works once:\n\n"
            f"{base}/#reset={token}\n\nIf it was not you, ignore this mail: nothing changes."
        )
        return Letter(user.email, "Reset your parley password", body)

    async def ask_confirmation(self, s: AsyncSession, user: User, base: str) -> None:
        """A link to confirm the user's email, mailed after the transaction commits."""
        if self.outbox is not None:
            await mail_outbox.add(s, "confirm", user.email, {"base": base})

    async def resend_confirmation(self, email: str, client: str | None, base: str) -> None:
        """Another confirmation link: the same answer and work whatever the email."""
        await self._ready_to_mail(email, client)
        async with self._db.transaction() as s:
            await mail_outbox.add(s, "confirm", users.normalize_email(email), {"base": base})

    async def _confirm_letter(self, mail: OutboxMail) -> Letter | None:
        async with self._db.transaction() as s:
            user = await users.find_user_by_email(s, mail.address)
            if user is None or user.email_confirmed_at is not None:
                return None
            token = f"pc_{secrets.token_urlsafe(32)}"
            expires = utcnow() + timedelta(hours=CONFIRM_HOURS)
            await account_tokens.add(s, hash_token(token), CONFIRM, user.id, "mail", expires)
        body = (
            f"Confirm that {user.email} is yours, to use your new parley account:\n\n"
            f"{mail.payload['base']}/#confirm={token}\n\nThe link works once, for "
            f"{CONFIRM_HOURS} hours. If you made no account, ignore this mail."
        )
        return Letter(user.email, "Confirm your email for parley", body)

    async def confirm(self, token: str) -> User:
        """The email confirmed by its link (audited); LinkRefused when not one."""
        async with self._db.transaction() as s:
            found = await account_tokens.use(s, hash_token(token), CONFIRM)
            user = await users.get_user(s, found.user_id) if found else None
            if found is None or user is None:
                raise LinkRefused(
                    "this confirmation link is not valid, was used or has expired: ask for another",
                    param="token",
                )
            user.email_confirmed_at = utcnow()
            await self._record(s, AuditAction.EMAIL_CONFIRMED, user, Actor(user.id, user.email), {})
        if self._sessions is not None:
            self._sessions.forget_credentials(user.id)
        return user

    async def _no_password_letter(self, s: AsyncSession, user: User, base: str) -> Letter:
        names = await identities.providers_of(s, user.id) or ["your identity provider"]
        body = (
            f"Someone (we hope you) asked to reset the password of {user.email} on parley.\n\n"
            f"This account has no password: it signs in with {', '.join(names)}. Sign in "
            f"there, at {base}/."
        )
        return Letter(user.email, "Signing in to parley", body)

    async def _new_link(self, s: AsyncSession, user: User, made_by: str) -> tuple[str, datetime]:
        token = f"pr_{secrets.token_urlsafe(32)}"
        expires = utcnow() + timedelta(minutes=self._settings.reset_link_minutes)
        await account_tokens.add(s, hash_token(token), RESET, user.id, made_by, expires)
        return token, expires

    async def link_for(self, actor: Actor, user_id: str, base: str) -> tuple[str, datetime]:
        """An admin's one-time link to hand to the user (audited; not for an account
        without a password)."""
        async with self._db.transaction() as s:
            user = await users.get_user(s, user_id)
            if user is None:
                raise no_such("user", user_id, code="user_not_found", param="user_id")
            _has_password(user)
            token, expires = await self._new_link(s, user, actor.name)
            await self._record(s, AuditAction.RESET_LINK_MADE, user, actor, {})
        return f"{base}/#reset={token}", expires

    async def reset(self, token: str, password: str, client: str | None) -> Login:
        """The link's new password set: every session ended, the user signed in."""
        async with self._db.transaction() as s:
            found = await account_tokens.use(s, hash_token(token), RESET)
            user = await users.get_user(s, found.user_id) if found else None
            if found is None or user is None:
                raise LinkRefused(
                    "this reset link is not valid, was used or has expired: ask for a new one",
                    param="token",
                )
            check_password(password, email=user.email, param="password")
            await self._set(s, user, password, Actor(user.id, user.email), found.made_by)
        assert self._sessions is not None
        self._sessions.forget_credentials(user.id)
        return await self._sessions.open_sso_session(user.id, "password reset")

    async def set_password(self, actor: Actor, email: str, password: str) -> User:
        """The operator's reset (the CLI): the password rules apply all the same."""
        async with self._db.transaction() as s:
            user = await users.find_user_by_email(s, email)
            if user is None:
                raise no_such("user", email, code="user_not_found", param="email")
            _has_password(user)
            check_password(password, email=user.email)
            await self._set(s, user, password, actor, actor.name)
        return user

    async def _set(
        self, s: AsyncSession, user: User, password: str, actor: Actor, via: str
    ) -> None:
        await users.set_password_hash(s, user, await self._passwords.hash(password))
        await account_tokens.drop_unused(s, user.id, RESET)
        ended = await credentials.revoke_sessions(s, user_id=user.id)
        await self._record(s, AuditAction.PASSWORD_RESET, user, actor, {"via": via, "ended": ended})
        await self.notice(s, user.email, "Your parley password was changed", CHANGED)

    async def notice(self, s: AsyncSession, to: str, subject: str, body: str) -> None:
        """A mail that tells the user something, sent after the transaction commits."""
        if self.outbox is not None:
            await mail_outbox.add(s, "notice", to, {"subject": subject, "body": body})

    async def _record(
        self,
        s: AsyncSession,
        action: AuditAction,
        user: User,
        actor: Actor,
        detail: dict[str, object],
    ) -> None:
        await self._audit.record_in(s, about_user(action, actor, user, detail))


def _has_password(user: User) -> None:
    if user.password_hash == SSO_ONLY:
        raise NoPassword(
            "this account signs in through an identity provider: it has no password to reset"
        )
