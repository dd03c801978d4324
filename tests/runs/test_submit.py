"""Submitting a message through HTTP: idempotency keys, and bad sends refused before anything
is stored."""

from __future__ import annotations

import asyncio

import httpx

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import JSON, new_chat, send_json, wait_run
from tests.sse import collect


async def test_twenty_concurrent_posts_with_one_key_make_one_run(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = await new_chat(run_client, auth)
    headers = {**auth, **JSON, "Idempotency-Key": "key-1"}
    body = {"content": "once please"}
    responses = await asyncio.gather(
        *(
            run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=headers)
            for _ in range(20)
        )
    )
    assert [r.status_code for r in responses] == [202] * 20
    assert len({r.json()["run_id"] for r in responses}) == 1
    await wait_run(run_client, auth, responses[0].json()["run_id"])
    msgs = (await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()["data"]
    assert [m["role"] for m in msgs] == ["assistant", "user"]
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    assert engine.started == 1
    # a retried streaming POST attaches to the same run's stream
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json=body,
        headers={**auth, "Idempotency-Key": "key-1"},
    ) as r:
        evs = await collect(r)
    assert evs[-1].data["run_id"] == responses[0].json()["run_id"]
    # same key, different body: 422; other users' keys are their own
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "other"}, headers=headers
    )
    assert_error(r, 422, "idempotency_key_reused")
    other = await user_headers(run_client, "bob@example.com")
    other_chat = await new_chat(run_client, other)
    r = await run_client.post(
        f"/api/chats/{other_chat}/messages",
        json=body,
        headers={**other, **JSON, "Idempotency-Key": "key-1"},
    )
    assert r.status_code == 202
    assert r.json()["run_id"] != responses[0].json()["run_id"]


async def test_bad_sends_get_clear_errors_and_store_nothing(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    url = f"/api/chats/{chat_id}/messages"
    cases = [
        ({"content": ""}, 422, None),
        ({"content": "   "}, 422, "invalid_content"),
        ({"content": "x", "model": "gpt-9"}, 422, "model_not_found"),
        ({"content": "x", "max_tokens": 100_000}, 422, "max_tokens_too_large"),
        ({"content": "x", "max_tokens": 0}, 422, None),
        ({"content": "x", "temperature": 5}, 422, None),
        # the wrong JSON type is refused, not read as a number (lax pydantic takes true as 1)
        ({"content": "x", "max_tokens": True}, 422, None),
        ({"content": "x", "max_tokens": "5"}, 422, None),
        ({"content": "x", "temperature": False}, 422, None),
        ({"content": "x" * 40_000}, 422, "content_too_long"),
        ({"content": "x", "extra": 1}, 422, None),
    ]
    for body, status, code in cases:
        assert_error(await run_client.post(url, json=body, headers=auth), status, code)
    assert_error(
        await run_client.post(url, json={"content": "x"}, headers={**auth, "Idempotency-Key": ""}),
        422,
    )
    assert_error(
        await run_client.post("/api/chats/chat_nope/messages", json={"content": "x"}, headers=auth),
        404,
    )
    msgs = (await run_client.get(url, headers=auth)).json()["data"]
    assert msgs == []
    assert_error(await run_client.get("/api/runs/run_nope", headers=auth), 404, "run_not_found")
    accepted = await send_json(run_client, auth, chat_id)
    r = await run_client.get(
        f"/api/runs/{accepted['run_id']}/events", headers={**auth, "Last-Event-ID": "garbage"}
    )
    assert_error(r, 400, "invalid_last_event_id")
    other_chat = await new_chat(run_client, auth)
    r = await run_client.post(
        f"/api/chats/{other_chat}/runs/{accepted['run_id']}/cancel", headers=auth
    )
    assert_error(r, 404, "run_not_found")
