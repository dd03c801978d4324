"""Signing in with GitHub (plain OAuth 2.0, no ID token; ``accounts/oidc.py`` runs the same
flow — state, PKCE, the browser binding — and asks here for its endpoints and, with the
access token, for the claims): the account's id (the subject: a login can be renamed), its
primary email and whether GitHub verified it, its login and, with ``read:org``, its
organisations (for the operator's rules)."""

from __future__ import annotations

from typing import Any

import httpx

from parley.accounts.oidc_settings import OidcProvider


def github_metadata(provider: OidcProvider) -> dict[str, Any]:
    site = provider.issuer.rstrip("/")
    return {
        "issuer": site,
        "authorization_endpoint": f"{site}/login/oauth/authorize",
        "token_endpoint": f"{site}/login/oauth/access_token",
    }


async def github_claims(provider: OidcProvider, access_token: str) -> dict[str, Any]:
    """The signed-in GitHub user's claims, read from the API with their token
    (httpx.HTTPError or ValueError when it does not answer as GitHub does)."""
    api = str(provider.api_url).rstrip("/")
    headers = {
        "Authorization": f"Bearer {access_token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        user = await _json(http, f"{api}/user")
        emails = await _json(http, f"{api}/user/emails")
        orgs = await _json(http, f"{api}/user/orgs") if "read:org" in provider.scope else []
    if not isinstance(user, dict) or not isinstance(user.get("id"), int):
        raise ValueError("GitHub's /user has no id")
    primary = next(
        (e for e in emails if isinstance(e, dict) and e.get("primary") is True),
        None,
    ) if isinstance(emails, list) else None  # fmt: skip
    return {
        "sub": str(user["id"]),
        "login": str(user.get("login", "")),
        "name": user.get("name"),
        "email": primary.get("email") if primary else None,
        "email_verified": bool(primary and primary.get("verified") is True),
        "orgs": [str(o.get("login")) for o in orgs if isinstance(o, dict)],
    }


async def _json(http: httpx.AsyncClient, url: str) -> Any:
    answer = await http.get(url)
    answer.raise_for_status()
    return answer.json()
