"""Small helpers for talking to parley over HTTP in tests."""

from __future__ import annotations

from typing import Any

import httpx

PASSWORD = "correct horse battery"


async def signup(client: httpx.AsyncClient, email: str) -> dict[str, Any]:
    r = await client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    client.cookies.clear()  # tests choose their credential explicitly
    return body


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def user_headers(client: httpx.AsyncClient, email: str) -> dict[str, str]:
    return bearer((await signup(client, email))["token"])


async def new_api_key(client: httpx.AsyncClient, email: str) -> str:
    """A new user's API key (its secret)."""
    session = (await signup(client, email))["token"]
    r = await client.post("/api/keys", json={"name": "script"}, headers=bearer(session))
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = r.json()["error"]
    refusal = status in (429, 503)  # says when to retry, and how to back off after that
    extra = {"retry_after", "backoff"} if refusal else set()
    if error.get("code") == "content_blocked":
        extra.add("category")  # the content policy category the prompt breaks
    assert set(error) == {"type", "code", "message", "param", *extra}, error
    if refusal:
        assert error["retry_after"] >= 1 and str(error["retry_after"]) == r.headers["Retry-After"]
        assert error["backoff"]["strategy"] in ("exponential", "linear"), error
    assert error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error
