"""Signing in with GitHub's plain OAuth 2.0 (issue 44), against a stand-in of GitHub's site
and API (`tests/accounts/github_site.py`: github.com is not reachable here) that checks the
client's secret, the code, the redirect address and the PKCE verifier as GitHub does: a
first sign-in makes the account from the primary verified email, organisations feed the
rules, the account is found again by GitHub's id when the email changes, an unverified
email is refused, and an existing account is linked only where allowed. Both databases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.accounts.github_site import CLIENT_ID, CLIENT_SECRET, GithubSite, GithubUser
from tests.builders import served
from tests.helpers import signup


@pytest.fixture
async def github() -> AsyncIterator[tuple[GithubSite, str]]:
    site = GithubSite()
    async with served(site.app()) as url:
        yield site, url


@pytest.fixture
def settings_overrides(github: tuple[GithubSite, str]) -> dict[str, Any]:
    base = {"kind": "github", "issuer": github[1], "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET}  # fmt: skip
    gh = {**base, "name": "github", "label": "GitHub", "scope": "read:user user:email read:org",
          "rules": [{"claim": "orgs", "value": "acme", "tier": "pro"}]}  # fmt: skip
    linking = {**base, "name": "gh-linking", "link_verified_email": True}
    return {"accounts": {"oidc": [gh, linking]}}


async def sign_in(client: httpx.AsyncClient, login: str, name: str = "github") -> httpx.Response:
    r = await client.get(f"/api/auth/oidc/{name}/start")
    assert r.status_code == 303, r.text
    async with httpx.AsyncClient() as browser:  # GitHub's page, approving as `login`
        approved = await browser.get(f"{r.headers['location']}&login={login}")
    assert approved.status_code == 302, approved.text
    back = urlsplit(approved.headers["location"])
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    return await client.get(back.path, params=query)


def email(address: str, verified: bool = True) -> list[dict[str, Any]]:
    return [{"email": "old@example.org", "primary": False, "verified": True},
            {"email": address, "primary": True, "verified": verified}]  # fmt: skip


async def test_a_first_sign_in_makes_the_account_and_orgs_set_the_tier(
    client: httpx.AsyncClient, github: tuple[GithubSite, str]
) -> None:
    site, _ = github
    site.users["octo"] = GithubUser(1234, "octo", email("octo@example.com"), ["acme"])
    r = await sign_in(client, "octo")
    assert (r.status_code, r.headers["location"]) == (303, "/"), r.text
    me = (await client.get("/api/me")).json()["user"]
    assert (me["email"], me["tier"]) == ("octo@example.com", "pro")
    providers = (await client.get("/api/auth/providers")).json()["providers"]
    assert {"name": "github", "label": "GitHub"} in providers

    # renamed, another email, out of the org: the same account, by GitHub's id
    site.users["octo"] = GithubUser(1234, "octo", email("octo@new.example"), [])
    client.cookies.clear()
    assert (await sign_in(client, "octo")).headers["location"] == "/"
    again = (await client.get("/api/me")).json()["user"]
    assert (again["id"], again["tier"]) == (me["id"], "free")


async def test_an_unverified_email_is_refused_and_an_account_linked_only_where_allowed(
    client: httpx.AsyncClient, github: tuple[GithubSite, str]
) -> None:
    site, _ = github
    site.users["sly"] = GithubUser(1, "sly", email("sly@example.com", verified=False))
    r = await sign_in(client, "sly")
    assert r.headers["location"].startswith("/?sso_error="), r.text
    assert (await client.get("/api/me")).status_code == 401

    await signup(client, "ann@example.com")
    site.users["ann"] = GithubUser(2, "ann", email("ann@example.com"))
    r = await sign_in(client, "ann")
    assert r.headers["location"].startswith("/?sso_error="), r.text
    r = await sign_in(client, "ann", name="gh-linking")
    assert r.headers["location"] == "/", r.text
    assert (await client.get("/api/me")).json()["user"]["email"] == "ann@example.com"
