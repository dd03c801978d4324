"""Scoped API keys (issue 44): a key does only what its scopes say (403
``insufficient_scope`` otherwise), uses only its models (403 ``model_not_allowed_for_key``),
stops when it expires, and shows its last use and address; a key made before scopes may do
all but administer; the ``admin`` scope is for admins' and auditors' keys. Both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import update

from parley.domain import utcnow
from parley.services import Services
from parley.store.schema import ApiKey
from tests.api.test_models import TIERS, TWO_MODELS
from tests.helpers import assert_error, bearer, user_headers

JSON = {"Accept": "application/json"}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # no cached credentials: each request looks its key up (its expiry seen at once)
    return {"models": TWO_MODELS, "tiers": TIERS, "accounts": {"auth_cache_seconds": 0}}


async def new_key(client: httpx.AsyncClient, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    r = await client.post("/api/keys", json={"name": "k", **body}, headers=auth)
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


async def test_a_key_does_only_what_its_scopes_say(client: httpx.AsyncClient) -> None:
    ada = await user_headers(client, "ada@example.com")
    chat = (await client.post("/api/chats", json={"title": "t"}, headers=ada)).json()
    reader = bearer((await new_key(client, ada, scopes=["chats:read"]))["key"])
    assert (await client.get("/api/chats", headers=reader)).status_code == 200
    assert (
        await client.get(f"/api/chats/{chat['id']}/messages", headers=reader)
    ).status_code == 200
    for method, path, body in [
        ("POST", "/api/chats", {"title": "x"}),
        ("DELETE", f"/api/chats/{chat['id']}", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", {"model": "parley-fake", "messages": []}),
        ("GET", "/api/admin/users", None),
    ]:
        r = await client.request(method, path, json=body, headers=reader)
        assert_error(r, 403, "insufficient_scope")
    program = bearer((await new_key(client, ada, scopes=["v1", "models"]))["key"])
    assert (await client.get("/v1/models", headers=program)).status_code == 200
    assert_error(await client.get("/api/chats", headers=program), 403, "insufficient_scope")
    assert (await client.get(f"/api/chats/{chat['id']}", headers=ada)).status_code == 200


async def test_a_key_uses_only_its_models(client: httpx.AsyncClient) -> None:
    ada = await user_headers(client, "ada@example.com")
    key = bearer((await new_key(client, ada, models=["other"]))["key"])
    chat = (await client.post("/api/chats", json={"title": "t"}, headers=key)).json()
    r = await client.post(
        f"/api/chats/{chat['id']}/messages",
        json={"content": "hi", "model": "parley-fake"},
        headers={**key, **JSON},
    )
    assert_error(r, 403, "model_not_allowed_for_key")
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "parley-fake", "messages": [{"role": "user", "content": "hi"}]},
        headers=key,
    )
    assert r.status_code == 403 and "may not use model" in r.text, r.text
    r = await client.post(
        f"/api/chats/{chat['id']}/messages",
        json={"content": "hi", "model": "other"},
        headers={**key, **JSON},
    )
    assert r.status_code == 202, r.text
    r = await client.post("/api/keys", json={"name": "k", "models": ["nope"]}, headers=ada)
    assert_error(r, 422, "model_not_found")


async def test_a_key_expires_and_shows_its_last_use(
    client: httpx.AsyncClient, services: Services
) -> None:
    ada = await user_headers(client, "ada@example.com")
    made = await new_key(client, ada, expires_in_days=1)
    assert made["expires_at"] is not None and made["last_used_at"] is None
    key = bearer(made["key"])
    assert (await client.get("/api/chats", headers=key)).status_code == 200
    (listed,) = (await client.get("/api/keys", headers=ada)).json()["data"]
    assert listed["last_used_address"] == "127.0.0.1" and listed["last_used_at"] is not None
    assert listed["scopes"] == ["chats:read", "chats:write", "models", "v1"]  # all but admin
    async with services.db.transaction() as s:  # a day later
        await s.execute(update(ApiKey).values(expires_at=utcnow()))
    assert_error(await client.get("/api/chats", headers=key), 401, "invalid_token")


async def test_only_admins_and_auditors_make_admin_keys(client: httpx.AsyncClient) -> None:
    ada = await user_headers(client, "ada@example.com")
    r = await client.post("/api/keys", json={"name": "k", "scopes": ["admin"]}, headers=ada)
    assert_error(r, 403, "admin_only")
    r = await client.post("/api/keys", json={"name": "k", "scopes": ["everything"]}, headers=ada)
    assert_error(r, 422)
