"""The accounts service: sign up, log in and out, authenticate, manage API keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts import tokens
from parley.accounts.passwords import Passwords
from parley.accounts.throttle import LoginThrottle
from parley.config import Settings
from parley.domain import CredentialKind, utcnow
from parley.errors import InvalidRequest, NotFound, RateLimited, Unauthenticated
from parley.store import credentials, users
from parley.store.database import Database
from parley.store.schema import ApiKey, User
from parley.store.schema import Session as SessionRow


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for, and by which credential."""

    user_id: str
    email: str
    tier: str
    kind: CredentialKind
    credential_id: str


@dataclass(frozen=True, slots=True)
class Login:
    user: User
    token: str
    session_id: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class NewApiKey:
    key: ApiKey
    secret: str


class Accounts:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        passwords: Passwords,
        throttle: LoginThrottle,
    ) -> None:
        self._db = db
        self._settings = settings
        self._passwords = passwords
        self._throttle = throttle

    async def signup(self, email: str, password: str) -> Login:
        password_hash = await self._passwords.hash(password)
        async with self._db.transaction() as s:
            user = await users.create_user(
                s, email=email, password_hash=password_hash, tier=self._settings.default_tier
            )
            return await self._open_session(s, user)

    async def login(self, email: str, password: str, client: str | None) -> Login:
        keys = [f"email:{users.normalize_email(email)}"]
        if client:
            keys.append(f"client:{client}")
        wait = self._throttle.retry_after(keys)
        if wait is not None:
            raise RateLimited(
                "too many failed logins; try again later",
                code="too_many_login_attempts",
                retry_after=wait,
            )
        async with self._db.transaction() as s:
            user = await users.find_user_by_email(s, email)
        if user is None:
            await self._passwords.burn(password)
        else:
            verdict = await self._passwords.verify(user.password_hash, password)
            if verdict.ok:
                self._throttle.succeeded(keys[0])
                async with self._db.transaction() as s:
                    user = await users.get_user(s, user.id) or user
                    if verdict.needs_rehash:
                        new_hash = await self._passwords.hash(password)
                        await users.set_password_hash(s, user, new_hash)
                    return await self._open_session(s, user)
        self._throttle.failed(keys)
        raise Unauthenticated("email or password is wrong", code="invalid_login")

    async def logout(self, principal: Principal) -> None:
        if principal.kind is not CredentialKind.SESSION:
            raise InvalidRequest("logout ends a session; revoke an API key with DELETE /api/keys")
        async with self._db.transaction() as s:
            await credentials.revoke_session(
                s, user_id=principal.user_id, session_id=principal.credential_id
            )

    async def authenticate(self, token: str) -> Principal:
        """The principal a bearer token or session cookie stands for, or Unauthenticated."""
        token_hash = tokens.hash_token(token)
        now = utcnow()
        async with self._db.transaction() as s:
            credential: SessionRow | ApiKey | None
            if token.startswith(tokens.API_KEY_PREFIX):
                credential = await credentials.find_live_api_key(s, token_hash)
                kind = CredentialKind.API_KEY
                if credential is not None:
                    await credentials.touch_api_key(s, credential, now)
            else:
                credential = await credentials.find_live_session(s, token_hash, now)
                kind = CredentialKind.SESSION
            user = await users.get_user(s, credential.user_id) if credential else None
        if credential is None or user is None:
            raise Unauthenticated(
                "the token is not valid, has expired or was revoked", code="invalid_token"
            )
        return Principal(
            user_id=user.id,
            email=user.email,
            tier=user.tier,
            kind=kind,
            credential_id=credential.id,
        )

    async def me(self, principal: Principal) -> User:
        async with self._db.transaction() as s:
            user = await users.get_user(s, principal.user_id)
        if user is None:
            raise Unauthenticated("the account no longer exists", code="invalid_token")
        return user

    async def create_api_key(self, principal: Principal, name: str) -> NewApiKey:
        secret = tokens.new_api_key()
        async with self._db.transaction() as s:
            key = await credentials.create_api_key(
                s,
                user_id=principal.user_id,
                name=name,
                token_hash=tokens.hash_token(secret),
                hint=tokens.key_hint(secret),
            )
        return NewApiKey(key=key, secret=secret)

    async def list_api_keys(self, principal: Principal) -> list[ApiKey]:
        async with self._db.transaction() as s:
            return await credentials.list_api_keys(s, principal.user_id)

    async def revoke_api_key(self, principal: Principal, key_id: str) -> None:
        async with self._db.transaction() as s:
            found = await credentials.revoke_api_key(s, user_id=principal.user_id, key_id=key_id)
        if not found:
            raise NotFound(
                f"no API key with id {key_id!r}", code="api_key_not_found", param="key_id"
            )

    def csrf_token(self, session_id: str) -> str:
        return tokens.csrf_token(self._settings.secret_key.get_secret_value(), session_id)

    def csrf_valid(self, principal: Principal, presented: str | None) -> bool:
        return tokens.csrf_token_valid(
            self._settings.secret_key.get_secret_value(), principal.credential_id, presented
        )

    async def _open_session(self, s: AsyncSession, user: User) -> Login:
        token = tokens.new_session_token()
        row = await credentials.create_session(
            s,
            user_id=user.id,
            token_hash=tokens.hash_token(token),
            ttl=timedelta(seconds=self._settings.session_ttl_seconds),
        )
        return Login(user=user, token=token, session_id=row.id, expires_at=row.expires_at)
