"""Signing in with an OpenID Connect provider (``accounts.oidc``): the authorization code
flow with PKCE (Authlib's client), the provider found by discovery, the ID token checked
with joserfc against the provider's keys (JWKS, fetched again when a token names a key it
does not hold: key rotation) — signature, ``iss``, ``aud``, ``exp``, ``iat``, ``nonce``; only
asymmetric algorithms, never ``none``.

``start`` answers the provider's address and a binding for the browser (an HttpOnly cookie
the callback must bring back, so nobody can finish a sign-in begun in another browser); the
``state`` is the flow itself (provider, nonce, PKCE verifier, binding), sealed and
short-lived, so any api process can finish it. ``finish`` checks all of it, finds the user
by (provider, subject) — or, on a first sign-in, links an existing account only by a
verified email and only where the provider allows it, else makes one — applies the
provider's claim rules to their tier and role (every sign-in, each change audited with
the rule that made it) and opens a session.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError, MissingKeyError
from joserfc.jwk import KeySet
from sqlalchemy.ext.asyncio import AsyncSession

from parley.accounts.claim_rules import apply_rules
from parley.accounts.github import github_claims, github_metadata
from parley.accounts.login import Login
from parley.accounts.management import Management
from parley.accounts.oidc_settings import OidcProvider, ProviderKind
from parley.audit.log import AuditLog
from parley.errors import Conflict, DependencyUnavailable, NotFound, Unauthenticated
from parley.sealing import Sealer, Unsealable
from parley.store import identities, users
from parley.store.database import Database
from parley.store.schema import User

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
LEEWAY_SECONDS = 60


class SignInRefused(Unauthenticated):
    code = "sso_failed"


class ProviderDown(DependencyUnavailable):
    code = "sso_provider_unavailable"


@dataclass(frozen=True, slots=True)
class Started:
    url: str
    binding: str  # for the browser's cookie


class SsoAccounts(Protocol):
    """What signing in needs of the accounts service."""

    audit: AuditLog

    async def create_sso_user(self, s: AsyncSession, email: str, provider: str) -> User: ...

    async def open_sso_session(self, user_id: str, provider: str) -> Login: ...

    def forget_credentials(self, user_id: str) -> None: ...


class OidcSignIn:
    def __init__(
        self,
        providers: list[OidcProvider],
        accounts: SsoAccounts,
        db: Database,
        secret_key: str,
        tiers: list[str],
    ) -> None:
        self._providers = {p.name: p for p in providers}
        self._tiers = tiers
        self._accounts = accounts
        self._db = db
        self._state = Sealer(secret_key, "oidc-state")
        self._metadata: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, KeySet] = {}

    def names(self) -> list[tuple[str, str]]:
        return [(p.name, p.label or p.name) for p in self._providers.values()]

    async def start(self, name: str, redirect_uri: str) -> Started:
        provider = self._provider(name)
        meta = await self._discover(provider)
        binding, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        verifier = secrets.token_urlsafe(48)
        state = self._state.seal(json.dumps({"p": name, "n": nonce, "v": verifier, "b": binding}))
        async with self._client(provider, redirect_uri) as client:
            url, _ = client.create_authorization_url(
                meta["authorization_endpoint"], state=state, nonce=nonce, code_verifier=verifier
            )
        return Started(url, binding)

    async def finish(
        self, name: str, redirect_uri: str, code: str, state: str, binding: str | None
    ) -> Login:
        provider = self._provider(name)
        flow = self._opened(provider, state, binding)
        claims = await self._claims(provider, redirect_uri, code, flow)
        user_id = await self._user_for(provider, claims)
        await self._apply_rules(provider, user_id, claims)
        return await self._accounts.open_sso_session(user_id, provider.name)

    def _opened(self, provider: OidcProvider, state: str, binding: str | None) -> dict[str, str]:
        try:
            flow = json.loads(self._state.open(state, provider.state_seconds))
        except (Unsealable, ValueError):
            raise SignInRefused("the sign-in's state is not valid or too old: try again") from None
        if (
            flow.get("p") != provider.name
            or not binding
            or not secrets.compare_digest(str(flow.get("b")), binding)
        ):
            raise SignInRefused("the sign-in was begun in another browser: try again")
        return dict(flow)

    async def _claims(
        self, provider: OidcProvider, redirect_uri: str, code: str, flow: dict[str, str]
    ) -> dict[str, Any]:
        meta = await self._discover(provider)
        async with self._client(provider, redirect_uri) as client:
            try:
                token = await client.fetch_token(
                    meta["token_endpoint"], code=code, code_verifier=flow["v"]
                )
            except Exception as e:  # refused, or not a token
                raise SignInRefused(f"the provider refused the code: {e}") from None
        if provider.kind is ProviderKind.GITHUB:
            return await self._github(provider, token)
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise SignInRefused("the provider gave no ID token")
        return await self.validated(provider, id_token, flow["n"])

    async def _github(self, provider: OidcProvider, token: dict[str, Any]) -> dict[str, Any]:
        access = token.get("access_token")
        if not isinstance(access, str):
            raise SignInRefused("GitHub gave no access token")
        try:
            return await github_claims(provider, access)
        except (httpx.HTTPError, ValueError) as e:
            raise ProviderDown(f"{provider.name}'s API did not answer: {type(e).__name__}") from e

    async def validated(
        self, provider: OidcProvider, id_token: str, nonce: str, now: int | None = None
    ) -> dict[str, Any]:
        """The ID token's claims, if it is the provider's, for this client and this sign-in
        (``now``: the time to judge it at, in seconds; the clock's by default)."""
        meta = await self._discover(provider)
        try:
            token = await self._decoded(provider, id_token)
            jwt.JWTClaimsRegistry(
                now=now,
                leeway=LEEWAY_SECONDS,
                iss={"essential": True, "value": meta["issuer"]},
                aud={"essential": True, "value": provider.client_id},
                sub={"essential": True},
                exp={"essential": True},
                iat={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(token.claims)
        except (JoseError, ValueError) as e:
            raise SignInRefused(f"the ID token is not valid: {type(e).__name__}") from None
        return dict(token.claims)

    async def _decoded(self, provider: OidcProvider, id_token: str) -> jwt.Token:
        """The token, its signature checked with the provider's keys — fetched again once
        when they do not hold its key or its signature fails (the provider rotated them)."""
        kid = _header(id_token).get("kid")
        keys = self._keys.get(provider.name)
        if keys is not None and (kid is None or _holds(keys, str(kid))):
            try:
                return jwt.decode(id_token, keys, ALGORITHMS)
            except (BadSignatureError, InvalidKeyIdError, MissingKeyError):
                pass  # perhaps rotated: fetched again below
        meta = await self._discover(provider)
        fetched = await self._get(provider, meta["jwks_uri"])
        keys = KeySet.import_key_set(fetched)  # type: ignore[arg-type]
        self._keys[provider.name] = keys
        return jwt.decode(id_token, keys, ALGORITHMS)

    async def _user_for(self, provider: OidcProvider, claims: dict[str, Any]) -> str:
        subject, email = str(claims["sub"]), claims.get("email")
        verified = claims.get("email_verified") is True
        async with self._db.transaction() as s:
            found = await identities.user_of(s, provider.name, subject)
            if found is not None:
                return found
            if not isinstance(email, str) or not email:
                raise SignInRefused("the provider did not say the account's email")
            if provider.kind is ProviderKind.GITHUB and not verified:  # GitHub always says
                raise SignInRefused("GitHub has not verified the account's primary email")
            existing = await users.find_user_by_email(s, email)
            if existing is not None and not (provider.link_verified_email and verified):
                raise EmailTaken(
                    "an account with this email exists: sign in with its password",
                )
            user = existing or await self._accounts.create_sso_user(s, email, provider.name)
            await identities.link(s, provider.name, subject, user.id)
            return user.id

    async def _apply_rules(
        self, provider: OidcProvider, user_id: str, claims: dict[str, Any]
    ) -> None:
        """The provider's rules say the user's tier and role, at every sign-in."""
        manage = Management(
            self._db, self._accounts.audit, self._tiers, self._accounts.forget_credentials
        )
        source = f"sso:{provider.name}"
        await apply_rules(manage, source, user_id, provider.rules, claims, self._tiers[0])

    def _provider(self, name: str) -> OidcProvider:
        provider = self._providers.get(name)
        if provider is None:
            raise NotFound(f"there is no sign-in provider {name!r}", code="no_such_provider")
        return provider

    def _client(self, provider: OidcProvider, redirect_uri: str) -> AsyncOAuth2Client:
        secret = provider.client_secret.get_secret_value() if provider.client_secret else None
        return AsyncOAuth2Client(
            client_id=provider.client_id,
            client_secret=secret,
            scope=provider.scope,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            # GitHub reads the client's secret from the form
            token_endpoint_auth_method=(
                "client_secret_post" if provider.kind is ProviderKind.GITHUB else None
            ),
            timeout=10,
        )

    async def _discover(self, provider: OidcProvider) -> dict[str, Any]:
        found = self._metadata.get(provider.name)
        if found is None and provider.kind is ProviderKind.GITHUB:
            found = self._metadata[provider.name] = github_metadata(provider)
        if found is None:
            where = provider.issuer.rstrip("/") + "/.well-known/openid-configuration"
            found = await self._get(provider, where)
            if (
                found.get("issuer") != provider.issuer.rstrip("/")
                and found.get("issuer") != provider.issuer
            ):
                raise ProviderDown(f"{provider.name}'s discovery names another issuer")
            self._metadata[provider.name] = found
        return found

    @staticmethod
    async def _get(provider: OidcProvider, url: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                answer = await http.get(url)
                answer.raise_for_status()
                body = answer.json()
        except (httpx.HTTPError, ValueError) as e:
            raise ProviderDown(f"{provider.name} could not be reached: {type(e).__name__}") from e
        if not isinstance(body, dict):
            raise ProviderDown(f"{provider.name} answered something else than JSON")
        return body


class EmailTaken(Conflict):
    code = "email_taken"


def _header(token: str) -> dict[str, Any]:
    import base64

    try:
        head = token.split(".", 1)[0]
        parsed = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, IndexError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _holds(keys: KeySet, kid: str) -> bool:
    try:
        keys.get_by_kid(kid)
    except (JoseError, ValueError, KeyError):
        return False
    return True
