"""GET /api/models: the configured models the caller's tier may use; sending to one."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.services import Services
from parley.store import users
from tests.builders import ROOMY_TIERS
from tests.helpers import assert_error, bearer, signup, user_headers

# Two models: the fake engine (the default, configured first) and an upstream that nothing
# answers (fine here: no worker runs, the runs stay queued).
TWO_MODELS = [
    {"name": "parley-fake", "engine": "fake"},
    {"name": "other", "engine": "openai", "replicas": [{"base_url": "http://127.0.0.1:9/v1"}]},
]
FREE = ROOMY_TIERS["free"]
TIERS = {
    **ROOMY_TIERS,
    "fake-only": {**FREE, "models": ["parley-fake"]},
    "other-only": {**FREE, "models": ["other"]},
}
JSON = {"Accept": "application/json"}
EVERY_MODEL = [
    {"id": "parley-fake", "object": "model", "default": True, "engine": "fake"},
    {"id": "other", "object": "model", "default": False, "engine": "openai"},
]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"models": TWO_MODELS, "tiers": TIERS}


async def _on_tier(
    client: httpx.AsyncClient, services: Services, email: str, tier: str
) -> dict[str, str]:
    auth = await user_headers(client, email)
    async with services.db.transaction() as s:
        user = await users.find_user_by_email(s, email)
        assert user is not None
        await users.set_tier(s, user, tier)
    return auth


async def _models(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    r = await client.get("/api/models", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["object"] == "list"
    data: list[dict[str, Any]] = body["data"]
    return data


async def _chat(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    chat_id: str = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
    return chat_id


async def test_lists_every_configured_model_in_order_the_default_first(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    assert await _models(client, auth) == EVERY_MODEL


async def test_a_tier_sees_only_the_models_it_allows(
    client: httpx.AsyncClient, services: Services
) -> None:
    fake_only = await _on_tier(client, services, "fake@example.com", "fake-only")
    assert await _models(client, fake_only) == [EVERY_MODEL[0]]
    # a tier without the default model: the one it may use, flagged as not the default
    other_only = await _on_tier(client, services, "other@example.com", "other-only")
    assert await _models(client, other_only) == [EVERY_MODEL[1]]
    plus = await _on_tier(client, services, "plus@example.com", "plus")
    assert await _models(client, plus) == EVERY_MODEL


async def test_every_credential_may_list_and_none_is_a_401(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    key = (await client.post("/api/keys", json={"name": "k"}, headers=auth)).json()["key"]
    assert await _models(client, bearer(key)) == EVERY_MODEL
    session = await signup(client, "cookie@example.com")
    client.cookies.set("parley_session", session["token"])
    try:
        assert await _models(client, {}) == EVERY_MODEL  # a GET: no CSRF header needed
    finally:
        client.cookies.clear()
    assert_error(await client.get("/api/models"), 401, "missing_credentials")
    assert_error(await client.get("/api/models", headers=bearer("ps_nope")), 401)


async def test_a_listed_model_answers_a_send_and_is_stored_on_the_answer(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await _chat(client, auth)
    for model in ("other", "parley-fake", None):
        body = {"content": "hello"} if model is None else {"content": "hello", "model": model}
        r = await client.post(f"/api/chats/{chat_id}/messages", json=body, headers={**auth, **JSON})
        assert r.status_code == 202, r.text
        run = (await client.get(f"/api/runs/{r.json()['run_id']}", headers=auth)).json()
        assert run["model"] == (model or "parley-fake")
    messages = (await client.get(f"/api/chats/{chat_id}/messages?order=asc", headers=auth)).json()
    answers = [m["model"] for m in messages["data"] if m["role"] == "assistant"]
    assert answers == ["other", "parley-fake", "parley-fake"]


async def test_a_model_the_tier_does_not_allow_is_refused(
    client: httpx.AsyncClient, services: Services
) -> None:
    auth = await _on_tier(client, services, "fake@example.com", "fake-only")
    chat_id = await _chat(client, auth)
    url = f"/api/chats/{chat_id}/messages"
    body = {"content": "hello", "model": "other"}
    assert_error(
        await client.post(url, json=body, headers={**auth, **JSON}), 403, "model_not_allowed"
    )
    assert (await client.get(url, headers=auth)).json()["data"] == []  # nothing stored
    body = {"content": "hello", "model": "parley-fake"}
    assert (await client.post(url, json=body, headers={**auth, **JSON})).status_code == 202


async def test_an_unknown_model_is_refused(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    chat_id = await _chat(client, auth)
    url = f"/api/chats/{chat_id}/messages"
    for model in ("gpt-9", "Other", "other "):
        body = {"content": "hello", "model": model}
        error = assert_error(
            await client.post(url, json=body, headers={**auth, **JSON}), 422, "model_not_found"
        )
        assert error["param"] == "model"
    assert (await client.get(url, headers=auth)).json()["data"] == []


@pytest.mark.parametrize("settings_overrides", [{}])
async def test_the_one_model_of_the_default_settings(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    assert await _models(client, auth) == [
        {"id": "parley-fake", "object": "model", "default": True, "engine": "fake"}
    ]


async def test_the_openapi_document_describes_it(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    op = doc["paths"]["/api/models"]["get"]
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/ModelList"}
    assert {"401", "403"} <= set(op["responses"])
    model = doc["components"]["schemas"]["ModelOut"]
    assert set(model["required"]) >= {"id", "default", "engine"}
    engine = doc["components"]["schemas"]["EngineKind"]
    assert {"builtin", "fake", "openai"} <= set(engine["enum"])
