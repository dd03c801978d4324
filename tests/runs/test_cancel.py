"""Stopping a run through HTTP: running (the slot is freed, the partial text kept) and queued."""

from __future__ import annotations

import httpx
import pytest

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import Event, collect, events, text_of
from tests.waiting import eventually


async def _slot_freed(engine: FakeEngine) -> None:
    """The engine slot is given back. How soon (about a second) is a timing claim, not a
    test's: it is not asserted here (bench/ does not measure it yet)."""

    async def free() -> bool:
        return engine.busy_slots == 0

    await eventually(free, "the engine slot to be freed")


@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"inter_token_latency_ms": 50, "output_tokens": 400, "slots": 2}}],
)
async def test_stop_frees_the_slot_and_keeps_the_partial_text(
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
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{run_id}/cancel", headers=auth)
    assert r.status_code == 200
    await _slot_freed(engine)
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

    async def busy() -> bool:
        return engine.busy_slots == 1

    await eventually(busy, "the first run to take the engine's one slot")
    second = await send_json(run_client, auth, chat_id, "second")  # waits: one slot only
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{second['run_id']}/cancel", headers=auth)
    assert r.json()["status"] == "cancelled"  # a queued run ends at once
    await run_client.post(f"/api/chats/{chat_id}/runs/{first['run_id']}/cancel", headers=auth)
    await _slot_freed(engine)
    assert (await wait_run(run_client, auth, first["run_id"]))["status"] == "cancelled"
    # the cancelled queued run never reaches the engine: the run queued after it does, and
    # is the second the engine ever started (one worker slot, so nothing else is in flight)
    third = await send_json(run_client, auth, chat_id, "third")

    async def third_in_the_engine() -> bool:
        run = (await run_client.get(f"/api/runs/{third['run_id']}", headers=auth)).json()
        return run["status"] == "running" and engine.busy_slots == 1

    await eventually(third_in_the_engine, "the run queued after the cancelled one to start")
    assert engine.started == 2
    message = await stored_message(run_client, auth, chat_id, second["message_id"])
    assert (message["status"], message["content"]) == ("cancelled", "")
    await run_client.post(f"/api/chats/{chat_id}/runs/{third['run_id']}/cancel", headers=auth)
    assert (await wait_run(run_client, auth, third["run_id"]))["status"] == "cancelled"
