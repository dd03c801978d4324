"""The accounts service: sign up, log in and out, authenticate, manage API keys."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts import tokens
from parley.accounts.challenge import ProofOfWork
from parley.accounts.credential_cache import CredentialCache
from parley.accounts.keys import KeyLimits, NewApiKey, key_limits
from parley.accounts.login import SSO_ONLY, Login
from parley.accounts.oidc import OidcSignIn
from parley.accounts.passwords import Passwords
from parley.accounts.policy import check_password
from parley.accounts.preferences import UNCHANGED, Preferences
from parley.accounts.principal import Principal
from parley.accounts.recovery import CHANGED, UNCONFIRMED, Recovery, Unconfirmed
from parley.accounts.settings import AccountSettings, ConfirmEmail
from parley.accounts.throttle import AccountThrottles
from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.audit.context import here
from parley.audit.log import AuditLog
from parley.domain import CredentialKind, UserRole, is_id, utcnow
from parley.errors import (
    InvalidRequest,
    PermissionDenied,
    Unauthenticated,
    ValidationFailed,
    no_such,
)
from parley.mail.outbox import Outbox
from parley.store import credentials, users
from parley.store.database import Database
from parley.store.schema import ApiKey, User
from parley.store.schema import Session as SessionRow


class Accounts:
    def __init__(
        self,
        db: Database,
        settings: AccountSettings,
        passwords: Passwords,
        throttles: AccountThrottles,
        *,
        secret_key: str,
        default_tier: str,
        audit: AuditLog,
        tiers: list[str] | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        """``outbox``: mail to users (resets, notices), when mail is set up."""
        # the default tier first: what a provider's rules fall back to
        self._tiers = [default_tier, *(t for t in tiers or [] if t != default_tier)]
        self._sso: OidcSignIn | None = None
        self._db = db
        self.audit = audit
        self._settings = settings
        self._secret = secret_key
        self._default_tier = default_tier
        self._passwords = passwords
        self._throttles = throttles
        self._idle = timedelta(seconds=settings.session_idle_timeout_seconds)
        self._cache = CredentialCache(settings.auth_cache_seconds)
        self.recovery = Recovery(db, settings, outbox, throttles, passwords, audit, self)
        self.proof = ProofOfWork(
            secret_key,
            throttles.bus,
            max_number=settings.challenge_max_number,
            seconds=settings.challenge_seconds,
        )

    @property
    def sso(self) -> OidcSignIn:
        """Sign-in with the configured OpenID Connect providers (made when first asked)."""
        if self._sso is None:
            providers = self._settings.oidc
            self._sso = OidcSignIn(providers, self, self._db, self._secret, self._tiers)
        return self._sso

    def forget_credentials(self, user_id: str) -> None:
        """The user's cached credentials dropped: the next request looks them up again."""
        self._cache.forget_user(user_id)

    def close(self) -> None:
        """Let go of the password hashing threads."""
        self._passwords.close()

    async def create_sso_user(self, s: AsyncSession, email: str, provider: str) -> User:
        """An account made by a provider's first sign-in: no password to sign in with."""
        user = await users.create_user(
            s, email=email, password_hash=SSO_ONLY, tier=self._default_tier
        )
        await self._record(s, AuditAction.SIGNUP, user, via=provider)
        return user

    async def hash_password(self, password: str) -> str:
        """A password an identity provider set (SCIM), hashed as a sign-up's is."""
        return await self._passwords.hash(password)

    async def open_sso_session(self, user_id: str, provider: str) -> Login:
        """A session for a user a provider signed in (Unauthenticated if disabled)."""
        async with self._db.transaction() as s:
            user = await users.get_user(s, user_id)
            if user is None or user.disabled_at is not None:
                raise Unauthenticated("the account is disabled", code="account_disabled")
            await self._record(s, AuditAction.LOGIN, user, via=provider)
            return await self._open_session(s, user)

    def check_local_passwords(self) -> None:
        if not self._settings.local_passwords:
            raise PermissionDenied(
                "password sign-in is turned off here: sign in with your identity provider",
                code="passwords_off",
            )

    async def signup(
        self,
        email: str,
        password: str,
        client: str | None = None,
        altcha: str | None = None,
        base: str = "",
    ) -> Login:
        """``altcha``: a solved proof-of-work, needed past a few sign-ups from ``client``;
        ``base``: the app's address, for the confirmation link (``confirm_email``)."""
        self.check_local_passwords()
        check_password(password, email=email)  # refusals cost no sign-up attempt
        if await self._throttles.signup_challenged(client):
            await self.proof.check(altcha)
        await self._throttles.before_signup(client)
        password_hash = await self._passwords.hash(password)
        async with self._db.transaction() as s:
            asks = self._settings.confirm_email is not ConfirmEmail.OFF
            user = await users.create_user(
                s, email=email, password_hash=password_hash, tier=self._default_tier,
                confirmed=not asks,
            )  # fmt: skip
            await self._record(s, AuditAction.SIGNUP, user)
            if asks:
                await self.recovery.ask_confirmation(s, user, base)
            return await self._open_session(s, user)

    async def login(
        self, email: str, password: str, client: str | None, altcha: str | None = None
    ) -> Login:
        """``altcha``: a solved proof-of-work, needed past a few failures (``throttle``)."""
        self.check_local_passwords()
        if await self._throttles.login_challenged(email, client):
            await self.proof.check(altcha)
        await self._throttles.before_password_check(email, client)
        async with self._db.transaction() as s:
            user = await users.find_user_by_email(s, email)
        if user is None:
            await self._passwords.burn(password)
        else:
            verdict = await self._passwords.verify(user.password_hash, password)
            if verdict.ok and user.disabled_at is not None:
                await self._refused(email, user, "disabled")
                raise Unauthenticated("the account is disabled", code="account_disabled")
            if verdict.ok and not self._may_sign_in(user):
                await self._refused(email, user, "email not confirmed")
                raise Unconfirmed(UNCONFIRMED)
            if verdict.ok:
                await self._throttles.password_ok(email, client)
                async with self._db.transaction() as s:
                    user = await users.get_user(s, user.id) or user
                    if verdict.needs_rehash:
                        new_hash = await self._passwords.hash(password)
                        await users.set_password_hash(s, user, new_hash)
                    await self._record(s, AuditAction.LOGIN, user)
                    return await self._open_session(s, user)
        await self._throttles.login_failed(client)
        await self._refused(email, user, "wrong password" if user else "no such account")
        raise Unauthenticated("email or password is wrong", code="invalid_login")

    async def _refused(self, email: str, user: User | None, why: str) -> None:
        await self.audit.record(
            AuditEvent(
                AuditAction.LOGIN_FAILED,
                Actor(None, email[:320]),
                "user" if user else None,
                user.id if user else None,
                {"reason": why},
            )
        )

    async def _record(
        self, s: AsyncSession, action: AuditAction, user: User, **detail: object
    ) -> None:
        """A user's own act, recorded in its transaction."""
        await self.audit.record_in(
            s, AuditEvent(action, Actor(user.id, user.email), "user", user.id, dict(detail))
        )

    async def change_password(
        self, principal: Principal, current: str, new: str, client: str | None
    ) -> int:
        """Set a new password (the current one must be given: guesses are throttled as
        logins are) and end every other session of the user; how many were ended."""
        check_password(new, email=principal.email, param="new_password")
        user = await self.confirm_password(principal, current, client, param="current_password")
        new_hash = await self._passwords.hash(new)
        self._cache.forget_user(principal.user_id)
        async with self._db.transaction() as s:
            user = await users.get_user(s, principal.user_id) or user
            await users.set_password_hash(s, user, new_hash)
            ended = await credentials.revoke_sessions(
                s, user_id=principal.user_id, keep=principal.credential_id
            )
            await self._record(s, AuditAction.PASSWORD_CHANGED, user, sessions_ended=ended)
            await self.recovery.notice(s, user.email, "Your parley password was changed", CHANGED)
            return ended

    async def confirm_password(
        self, principal: Principal, password: str, client: str | None, *, param: str
    ) -> User:
        """The user, if ``password`` is theirs (guesses are throttled as logins are)."""
        await self._throttles.before_password_check(principal.email, client)
        user = await self.me(principal)
        if not (await self._passwords.verify(user.password_hash, password)).ok:
            raise ValidationFailed("the password is wrong", code="wrong_password", param=param)
        await self._throttles.password_ok(principal.email, client)
        return user

    async def delete_user(self, user_id: str) -> bool:
        """Delete the user's row and with it every row of theirs (sessions, keys, chats,
        messages, runs, exports: ``ON DELETE CASCADE``); False if there was none."""
        self._cache.forget_user(user_id)
        async with self._db.transaction() as s:
            user = await users.get_user(s, user_id)
            if user is not None:
                await self._record(s, AuditAction.ACCOUNT_DELETED, user)
            return await users.delete_user(s, user_id)

    async def logout(self, principal: Principal) -> None:
        if principal.kind is not CredentialKind.SESSION:
            raise InvalidRequest("logout ends a session; revoke an API key with DELETE /api/keys")
        self._cache.forget_user(principal.user_id)
        async with self._db.transaction() as s:
            await credentials.revoke_session(
                s, user_id=principal.user_id, session_id=principal.credential_id
            )
            await self._acted(s, principal, AuditAction.LOGOUT)

    async def logout_everywhere(self, principal: Principal) -> int:
        """End every session of the user, this one too; how many were ended."""
        self._cache.forget_user(principal.user_id)
        async with self._db.transaction() as s:
            ended = await credentials.revoke_sessions(s, user_id=principal.user_id)
            await self._acted(s, principal, AuditAction.LOGOUT_EVERYWHERE, sessions_ended=ended)
            return ended

    async def list_sessions(self, principal: Principal) -> list[SessionRow]:
        async with self._db.transaction() as s:
            return await credentials.list_live_sessions(s, principal.user_id, utcnow(), self._idle)

    async def end_session(self, principal: Principal, session_id: str) -> None:
        """End one of the user's sessions; NotFound for anyone else's (or an ended one)."""
        found = is_id("sess", session_id)  # an id never issued is looked up nowhere
        self._cache.forget_user(principal.user_id)
        if found:
            async with self._db.transaction() as s:
                found = await credentials.revoke_session(
                    s, user_id=principal.user_id, session_id=session_id
                )
                if found:
                    await self._acted(s, principal, AuditAction.SESSION_ENDED, session=session_id)
        if not found:
            raise no_such("session", session_id, code="session_not_found", param="session_id")

    async def authenticate(self, token: str, address: str | None = None) -> Principal:
        """The principal a bearer token or session cookie stands for, or Unauthenticated
        (``address``: where it is used from, kept as a key's last use)."""
        token_hash = tokens.hash_token(token)
        if not token.startswith(tokens.API_KEY_PREFIX):  # sessions expire and idle out
            return await self._look_up(token, token_hash)
        cached = self._cache.get(token_hash)
        if cached is not None:
            return cached
        principal = await self._look_up(token, token_hash, address)
        self._cache.put(token_hash, principal)
        return principal

    async def _look_up(self, token: str, token_hash: str, address: str | None = None) -> Principal:
        now = utcnow()
        async with self._db.transaction() as s:
            credential: SessionRow | ApiKey | None
            if token.startswith(tokens.API_KEY_PREFIX):
                credential = await credentials.find_live_api_key(s, token_hash, now)
                kind = CredentialKind.API_KEY
                if credential is not None:
                    await credentials.touch_api_key(s, credential, now, address)
            else:
                credential = await credentials.find_live_session(s, token_hash, now, self._idle)
                kind = CredentialKind.SESSION
                if credential is not None:
                    await credentials.touch_session(s, credential, now)
            user = await users.get_user(s, credential.user_id) if credential else None
        if credential is None or user is None:
            raise Unauthenticated(
                "the token is not valid, has expired or was revoked", code="invalid_token"
            )
        if user.disabled_at is not None:
            raise Unauthenticated("the account is disabled", code="account_disabled")
        if not self._may_sign_in(user):
            raise Unconfirmed(UNCONFIRMED)
        return Principal(
            user_id=user.id,
            email=user.email,
            tier=user.tier,
            kind=kind,
            credential_id=credential.id,
            role=UserRole(user.role),
            email_confirmed=self._confirmed(user),
            **key_limits(credential),
        )

    def _confirmed(self, user: User) -> bool:
        off = self._settings.confirm_email is ConfirmEmail.OFF
        return off or user.email_confirmed_at is not None

    def _may_sign_in(self, user: User) -> bool:
        return self._confirmed(user) or self._settings.confirm_email is not ConfirmEmail.SIGNIN

    async def me(self, principal: Principal, change: Preferences = UNCHANGED) -> User:
        """The user's row (``change``: their preferences changed first)."""
        async with self._db.transaction() as s:
            user = await users.get_user(s, principal.user_id)
            if user is not None:
                change.apply(user)
        if user is None:
            raise Unauthenticated("the account no longer exists", code="invalid_token")
        return user

    async def create_api_key(
        self, principal: Principal, name: str, limits: KeyLimits | None = None
    ) -> NewApiKey:
        secret = tokens.new_api_key()
        limits = limits or KeyLimits()
        async with self._db.transaction() as s:
            key = await credentials.create_api_key(
                s,
                user_id=principal.user_id,
                name=name,
                token_hash=tokens.hash_token(secret),
                hint=tokens.key_hint(secret),
                scopes=limits.scopes,
                models=limits.models,
                expires_at=limits.expires_at,
            )
            detail = {"key": key.id, "name": name, "scopes": limits.scopes}
            await self._acted(s, principal, AuditAction.KEY_CREATED, **detail)
            made = f"An API key named {name!r} ({key.hint}) was just made for your account."
            await self.recovery.notice(s, principal.email, "A new parley API key", made)
        return NewApiKey(key=key, secret=secret)

    async def list_api_keys(self, principal: Principal) -> list[ApiKey]:
        async with self._db.transaction() as s:
            return await credentials.list_api_keys(s, principal.user_id)

    async def revoke_api_key(self, principal: Principal, key_id: str) -> None:
        found = is_id("key", key_id)  # an id never issued is looked up nowhere
        self._cache.forget_user(principal.user_id)
        if found:
            async with self._db.transaction() as s:
                found = await credentials.revoke_api_key(
                    s, user_id=principal.user_id, key_id=key_id
                )
                if found:
                    await self._acted(s, principal, AuditAction.KEY_REVOKED, key=key_id)
        if not found:
            raise no_such("API key", key_id, code="api_key_not_found", param="key_id")

    async def _acted(
        self, s: AsyncSession, who: Principal, action: AuditAction, **detail: object
    ) -> None:
        """What a signed-in user did to their own account, recorded in its transaction."""
        event = AuditEvent(action, Actor(who.user_id, who.email), "user", who.user_id, detail)
        await self.audit.record_in(s, event)

    def csrf_token(self, session_id: str) -> str:
        return tokens.csrf_token(self._secret, session_id)

    def csrf_valid(self, principal: Principal, presented: str | None) -> bool:
        return tokens.csrf_token_valid(self._secret, principal.credential_id, presented)

    async def _open_session(self, s: AsyncSession, user: User) -> Login:
        token = tokens.new_session_token()
        row = await credentials.create_session(
            s,
            user_id=user.id,
            token_hash=tokens.hash_token(token),
            ttl=timedelta(seconds=self._settings.session_ttl_seconds),
            user_agent=here().user_agent,
            address=here().address,
        )
        return Login(user=user, token=token, session_id=row.id, expires_at=row.expires_at)
