"""Signing in with OpenID Connect (issue 44). The flow against a real OpenID provider process
(`oidc-provider-mock`, started by the tests): a first sign-in makes the account, the
provider's groups set the tier and the role (and taking a group away takes them away at the
next sign-in), each result on the audit log; an existing account is linked only by a
verified email where the provider allows it; a state altered or brought back by another
browser is refused; a provider's new key is fetched (rotation: the provider restarted with
new keys). Forged ID tokens — wrong issuer, audience, nonce, expired, `alg: none`, a key not
in the provider's JWKS — are refused, from a provider of the test's own whose keys it
holds. Password sign-in can be turned off. Both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from parley.accounts.oidc import OidcSignIn, SignInRefused
from parley.accounts.oidc_settings import OidcProvider
from parley.domain import UserRole
from parley.services import Services
from tests.accounts.test_audit import make
from tests.builders import served
from tests.helpers import PASSWORD, assert_error, signup
from tests.processes import free_port
from tests.waiting import eventually_sync


class Provider:
    """The OpenID provider process, restartable on its port (a restart: new signing keys)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "oidc_provider_mock", "--port", str(self.port)]
        self._proc = subprocess.Popen(
            [*command, "--require-nonce", "true"],
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                return httpx.get(f"{self.url}/.well-known/openid-configuration").status_code == 200
            except httpx.TransportError:
                return False

        eventually_sync(up, "the OpenID provider to listen", timeout=30)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def user(self, sub: str, **claims: Any) -> None:
        r = httpx.put(f"{self.url}/users/{sub}", json=claims)
        assert r.status_code == 204, r.text


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider()
    p.start()
    yield p
    p.stop()


RULES = [
    {"claim": "groups", "value": "admins", "role": "admin"},
    {"claim": "groups", "value": "staff", "tier": "plus"},
]


@pytest.fixture
def settings_overrides(provider: Provider) -> dict[str, Any]:
    mock = {"name": "mock", "issuer": provider.url, "client_id": "parley", "client_secret": "s3",
            "rules": RULES}  # fmt: skip
    linking = {**mock, "name": "linking", "link_verified_email": True, "rules": []}
    return {"accounts": {"oidc": [mock, linking]}}


async def sign_in(
    client: httpx.AsyncClient, provider: Provider, sub: str, name: str = "mock", **tamper: Any
) -> httpx.Response:
    """The whole trip, as a browser makes it; parley's answer to the callback."""
    r = await client.get(f"/api/auth/oidc/{name}/start")
    assert r.status_code == 303, r.text
    where = r.headers["location"]
    assert parse_qs(urlsplit(where).query)["code_challenge_method"] == ["S256"]
    async with httpx.AsyncClient() as browser:  # the provider's own page, as a browser
        back = (await browser.post(where, data={"sub": sub})).headers["location"]
    query = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    query.update(tamper.get("query", {}))
    if tamper.get("other_browser"):
        client.cookies.delete("parley_sso", path="/api/auth/oidc")
    return await client.get(urlsplit(back).path, params=query)


async def me(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/api/me")
    assert r.status_code == 200, r.text
    user: dict[str, Any] = r.json()["user"]
    return user


async def test_sign_in_makes_the_account_and_groups_set_tier_and_role(
    client: httpx.AsyncClient, services: Services, provider: Provider
) -> None:
    provider.user(
        "alice", email="alice@example.com", email_verified=True, groups=["staff", "admins"]
    )
    r = await sign_in(client, provider, "alice")
    assert (r.status_code, r.headers["location"]) == (303, "/"), r.text
    user = await me(client)
    assert (user["email"], user["tier"], user["role"]) == ("alice@example.com", "plus", "admin")

    await signup(client, "root@example.com")  # another admin: alice may stop being one
    await make(services, "root@example.com", UserRole.ADMIN)
    provider.user("alice", email="alice@example.com", email_verified=True, groups=[])
    client.cookies.clear()
    assert (await sign_in(client, provider, "alice")).headers["location"] == "/"
    again = await me(client)
    assert again["id"] == user["id"] and (again["tier"], again["role"]) == ("free", "user")

    records = [line async for line in services.audit.export()]
    actions = [json.loads(line)["action"] for line in records]
    assert actions.count("session.login") == 2 and "account.signup" in actions
    changes = [json.loads(line) for line in records if "changed" in line]
    assert {c["detail"]["rule"] for c in changes} >= {
        "sso:mock:groups=staff; groups=admins", "sso:mock:no rule matched"
    }  # fmt: skip
    password = await client.post(
        "/api/auth/login", json={"email": "alice@example.com", "password": "anything at all 1"}
    )
    assert_error(password, 401)  # an account a provider made has no password


async def test_an_existing_account_is_linked_only_by_a_verified_email_where_allowed(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    await signup(client, "bob@example.com")
    client.cookies.clear()
    provider.user("bob-unverified", email="bob@example.com", email_verified=False)
    refused = await sign_in(client, provider, "bob-unverified", "linking")
    assert "sso_error" in refused.headers["location"]
    provider.user("bob-mock", email="bob@example.com", email_verified=True)
    refused = await sign_in(client, provider, "bob-mock", "mock")  # this provider never links
    assert "sso_error" in refused.headers["location"] and "exists" in refused.headers["location"]
    provider.user("bob", email="bob@example.com", email_verified=True)
    assert (await sign_in(client, provider, "bob", "linking")).headers["location"] == "/"
    assert (await me(client))["email"] == "bob@example.com"


async def test_a_state_altered_or_from_another_browser_is_refused(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    provider.user("carol", email="carol@example.com", email_verified=True)
    altered = await sign_in(client, provider, "carol", query={"state": "x" * 80})
    assert "sso_error" in altered.headers["location"]
    elsewhere = await sign_in(client, provider, "carol", other_browser=True)
    assert "another+browser" in elsewhere.headers["location"], elsewhere.headers["location"]
    assert (await client.get("/api/me")).status_code == 401


async def test_a_new_signing_key_is_fetched(client: httpx.AsyncClient, provider: Provider) -> None:
    provider.user("dave", email="dave@example.com", email_verified=True)
    assert (await sign_in(client, provider, "dave")).headers["location"] == "/"
    provider.stop()
    provider.start()  # new keys, the old ones gone
    provider.user("dave", email="dave@example.com", email_verified=True)
    client.cookies.clear()
    assert (await sign_in(client, provider, "dave")).headers["location"] == "/"


async def test_password_sign_in_can_be_turned_off(services: Services) -> None:
    from parley.api.app import create_app

    services.settings.accounts.local_passwords = False
    transport = httpx.ASGITransport(app=create_app(services, close_services=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as c:
        r = await c.post("/api/auth/signup", json={"email": "e@example.com", "password": PASSWORD})
        assert_error(r, 403, "passwords_off")
        options = (await c.get("/api/auth/providers")).json()
        assert options["local_passwords"] is False
        assert [p["name"] for p in options["providers"]] == ["mock", "linking"]


# --- forged ID tokens, from a provider of the test's own ------------------------------------

NONCE = "the-nonce"


@pytest.fixture
async def own_provider() -> AsyncIterator[tuple[str, RSAKey]]:
    """Discovery and a JWKS with one key the test holds."""
    key = RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256", "use": "sig"})
    issuer: dict[str, str] = {}

    async def discovery(_: Any) -> JSONResponse:
        base = issuer["url"]
        return JSONResponse(
            {"issuer": base, "authorization_endpoint": f"{base}/authorize",
             "token_endpoint": f"{base}/token", "jwks_uri": f"{base}/jwks"}
        )  # fmt: skip

    async def jwks(_: Any) -> JSONResponse:
        return JSONResponse(KeySet([key]).as_dict(private=False))

    routes = [Route("/.well-known/openid-configuration", discovery), Route("/jwks", jwks)]
    async with served(Starlette(routes=routes)) as base:
        issuer["url"] = base
        yield base, key


def claims(issuer: str, **changed: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer, "aud": "parley", "sub": "eve", "iat": now, "exp": now + 300,
            "nonce": NONCE, **changed}  # fmt: skip


@pytest.mark.parametrize(
    "forgery",
    ["wrong-issuer", "wrong-audience", "wrong-nonce", "expired", "alg-none", "unknown-key"],
)
async def test_forged_id_tokens_are_refused(
    services: Services, own_provider: tuple[str, RSAKey], forgery: str
) -> None:
    issuer, key = own_provider
    provider = OidcProvider(name="own", issuer=issuer, client_id="parley")
    sso = OidcSignIn([provider], services.accounts, services.db, "k", ["free"])

    def signed(body: dict[str, Any], by: RSAKey = key, kid: str = "k1") -> str:
        return jwt.encode({"alg": "RS256", "kid": kid}, body, by)

    good = signed(claims(issuer))
    assert (await sso.validated(provider, good, NONCE))["sub"] == "eve"  # the control
    other = RSAKey.generate_key(2048, parameters={"kid": "k2"})
    token, now = {
        "wrong-issuer": (signed(claims("https://evil.example")), None),
        "wrong-audience": (signed(claims(issuer, aud="other")), None),
        "wrong-nonce": (signed(claims(issuer, nonce="replayed")), None),
        "expired": (good, int(time.time()) + 3600),
        "alg-none": (_unsigned(claims(issuer)), None),
        "unknown-key": (signed(claims(issuer), other, "k2"), None),
    }[forgery]
    with pytest.raises(SignInRefused):
        await sso.validated(provider, token, NONCE, now=now)


def _unsigned(body: dict[str, Any]) -> str:
    import base64

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'kid': 'k1'})}.{part(body)}."
