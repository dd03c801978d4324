"""Stopping a run through HTTP: running (the slot is freed, the partial text kept) and queued."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import Event, collect, events, text_of


@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"inter_token_latency_ms": 50, "output_tokens": 400, "slots": 2}}],
)
async def test_stop_frees_the_slot_within_a_second_and_keeps_the_partial_text(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    run_id = accepted["run_id"]
    seen: list[Event] = []
    async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        async for ev in events(r):
            seen.append(ev)
            if sum(1 for e in seen if e.event == "delta") == 5:
                break
    assert engine.busy_slots == 1
    start = time.monotonic()
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{run_id}/cancel", headers=auth)
    assert r.status_code == 200
    while engine.busy_slots:
        assert time.monotonic() - start < 1.0, "the slot was not freed within 1 s"
        await asyncio.sleep(0.01)
    run = await wait_run(run_client, auth, run_id)
    assert run["status"] == "cancelled"
    assert run["finish_reason"] == "cancelled"
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert message["status"] == "cancelled"
    assert message["content"].startswith(text_of(seen))
    assert 5 <= run["usage"]["completion_tokens"] < 400
    # the stream ends with done, cancelled; the text is the partial one
    async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        evs = await collect(r)
    assert evs[-1].data["status"] == "cancelled"
    assert text_of(evs) == message["content"]
    # stopping again is harmless
    again = await run_client.post(f"/api/chats/{chat_id}/runs/{run_id}/cancel", headers=auth)
    assert again.json()["status"] == "cancelled"


@pytest.mark.parametrize(
    "run_overrides", [{"fake_engine": {"time_to_first_token_ms": 30_000, "slots": 1}}]
)
async def test_stop_before_the_first_token_and_while_queued(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "first")
    while engine.busy_slots == 0:
        await asyncio.sleep(0.01)
    second = await send_json(run_client, auth, chat_id, "second")  # waits: one slot only
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{second['run_id']}/cancel", headers=auth)
    assert r.json()["status"] == "cancelled"  # a queued run ends at once
    start = time.monotonic()
    await run_client.post(f"/api/chats/{chat_id}/runs/{first['run_id']}/cancel", headers=auth)
    while engine.busy_slots:
        assert time.monotonic() - start < 1.0
        await asyncio.sleep(0.01)
    assert (await wait_run(run_client, auth, first["run_id"]))["status"] == "cancelled"
    await asyncio.sleep(0.3)
    assert engine.started == 1  # the cancelled queued run never reached the engine
    message = await stored_message(run_client, auth, chat_id, second["message_id"])
    assert (message["status"], message["content"]) == ("cancelled", "")
