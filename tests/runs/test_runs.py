"""The run lifecycle through HTTP: stream, resume, stop, idempotency, recovery."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from parley.api.schemas import DeltaEventData, DoneEventData, ErrorEventData, StatusEventData
from parley.domain import RunStatus
from parley.engines.fake import FakeEngine, FakeEngineConfig
from parley.runs.worker import Worker
from parley.services import Services
from tests.helpers import assert_error, user_headers
from tests.sse import Event, collect, events, text_of

JSON = {"Accept": "application/json"}


async def new_chat(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    r = await client.post("/api/chats", json={"title": "t"}, headers=auth)
    chat_id: str = r.json()["id"]
    return chat_id


async def send_json(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str = "hello", **kw: Any
) -> dict[str, Any]:
    r = await client.post(
        f"/api/chats/{chat_id}/messages", json={"content": content, **kw}, headers={**auth, **JSON}
    )
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


async def stored_message(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, message_id: str
) -> dict[str, Any]:
    r = await client.get(f"/api/chats/{chat_id}/messages", params={"limit": 100}, headers=auth)
    found: dict[str, Any] = next(m for m in r.json()["data"] if m["id"] == message_id)
    return found


async def wait_run(
    client: httpx.AsyncClient, auth: dict[str, str], run_id: str, timeout: float = 10
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = (await client.get(f"/api/runs/{run_id}", headers=auth)).json()
        if run["status"] in {"completed", "cancelled", "failed", "rejected"}:
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


@pytest.fixture
async def auth(run_client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(run_client, "ada@example.com")


async def test_send_streams_the_answer_and_stores_it(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi there"}, headers=auth
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        evs = await collect(r)
    payloads: dict[str, type[BaseModel]] = {
        "status": StatusEventData,
        "delta": DeltaEventData,
        "error": ErrorEventData,
        "done": DoneEventData,
    }
    for e in evs:  # every event matches its documented payload
        payloads[e.event].model_validate(e.data, strict=False)
    kinds = [e.event for e in evs]
    assert kinds[:2] == ["status", "status"]
    assert [e.data["status"] for e in evs[:2]] == ["queued", "running"]
    assert kinds[-1] == "done"
    assert kinds.count("delta") == 24
    ids = [e.id for e in evs]
    assert len(set(ids)) == len(ids)
    done = evs[-1].data
    assert done["status"] == "completed"
    assert done["usage"]["completion_tokens"] == 24
    assert done["usage"]["prompt_tokens"] > 0
    message = await stored_message(run_client, auth, chat_id, done["message_id"])
    assert message["content"] == text_of(evs)
    assert message["status"] == "completed"
    assert message["role"] == "assistant"
    assert message["token_count"] == 24
    run = (await run_client.get(f"/api/runs/{done['run_id']}", headers=auth)).json()
    assert run["status"] == "completed"
    assert run["finish_reason"] == "stop"
    assert run["usage"] == done["usage"]
    history = (
        await run_client.get(
            f"/api/chats/{chat_id}/messages", params={"order": "asc"}, headers=auth
        )
    ).json()["data"]
    assert [(m["role"], m["status"]) for m in history] == [
        ("user", "completed"),
        ("assistant", "completed"),
    ]
    assert history[0]["content"] == "hi there"


async def test_history_is_the_prompt_of_the_next_turn(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "one")
    await wait_run(run_client, auth, first["run_id"])
    second = await send_json(run_client, auth, chat_id, "two")
    run = await wait_run(run_client, auth, second["run_id"])
    # prompt tokens of the fake engine grow with the history: user, assistant, user
    assert run["usage"]["prompt_tokens"] > 24
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert chats[0]["message_count"] == 4


async def test_json_clients_get_202_and_rejoin_with_events(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    assert accepted["status"] == "queued"
    async with run_client.stream(
        "GET", f"/api/runs/{accepted['run_id']}/events", headers=auth
    ) as r:
        evs = await collect(r)
    assert evs[-1].event == "done"
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert text_of(evs) == message["content"]


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {}


async def _read_some(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    run_id: str,
    last_id: str | None,
    cut_after: int,
    *,
    via_query: bool,
) -> tuple[list[Event], bool]:
    headers = dict(auth)
    params = {}
    if last_id is not None:
        if via_query:
            params["last_event_id"] = last_id
        else:
            headers["Last-Event-ID"] = last_id
    got: list[Event] = []
    async with client.stream(
        "GET", f"/api/runs/{run_id}/events", headers=headers, params=params
    ) as r:
        assert r.status_code == 200
        async for ev in events(r):
            got.append(ev)
            if ev.event == "done":
                return got, True
            if len(got) >= cut_after:
                break  # drop the connection here
    return got, False


@pytest.mark.parametrize("run_overrides", [{"fake_engine": {"inter_token_latency_ms": 3}}])
async def test_resume_after_random_cuts_is_exact(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_overrides: dict[str, Any]
) -> None:
    """Cut the stream at random points, resume from the last id: no gap, no duplicate."""
    rng = random.Random(7)
    chat_id = await new_chat(run_client, auth)
    for trial in range(12):
        accepted = await send_json(run_client, auth, chat_id, f"trial {trial}")
        seen: list[Event] = []
        last_id: str | None = None
        cuts = 0
        while True:
            chunk, finished = await _read_some(
                run_client,
                auth,
                accepted["run_id"],
                last_id,
                rng.randint(1, 6),
                via_query=rng.random() < 0.3,
            )
            seen += chunk
            if chunk:
                last_id = chunk[-1].id
            if finished:
                break
            cuts += 1
            if rng.random() < 0.5:
                await asyncio.sleep(rng.random() * 0.03)
        assert cuts >= 2, "the cuts should land mid-stream"
        ids = [e.id for e in seen]
        assert len(ids) == len(set(ids)), "an event was delivered twice"
        message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
        assert text_of(seen) == message["content"]
        assert sum(1 for e in seen if e.event == "delta") == 24


async def test_a_disconnect_does_not_cancel(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "x"}, headers=auth
    ) as r:
        async for ev in events(r):
            if ev.event == "delta":
                break  # the client goes away after the first token
    msgs = (await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()["data"]
    run_id = msgs[0]["run_id"]
    run = await wait_run(run_client, auth, run_id)
    assert run["status"] == "completed"
    assert run["usage"]["completion_tokens"] == 24


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


@pytest.mark.parametrize("run_overrides", [{"stream_ttl_seconds": 1}])
async def test_an_expired_stream_gives_the_stored_message_and_done(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    await wait_run(run_client, auth, accepted["run_id"])
    await asyncio.sleep(1.3)
    async with run_client.stream(
        "GET",
        f"/api/runs/{accepted['run_id']}/events",
        headers={**auth, "Last-Event-ID": "1-0"},
    ) as r:
        evs = await collect(r)
    assert [e.event for e in evs] == ["delta", "done"]
    assert evs[0].data["replace"] is True
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert text_of(evs) == message["content"]
    assert evs[1].data["status"] == "completed"


@pytest.mark.parametrize(
    "run_overrides",
    [
        {
            "fake_engine": {"time_to_first_token_ms": 2_500, "slots": 4},
            "ping_interval_seconds": 0.5,
            "max_open_streams_per_user": 2,
        }
    ],
)
async def test_idle_streams_are_pinged_and_open_streams_are_bounded(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    a = await send_json(run_client, auth, chat_id, "a")
    url = f"/api/runs/{a['run_id']}/events"
    async with run_client.stream("GET", url, headers=auth) as r1:
        lines = r1.aiter_lines()
        got = []
        start = time.monotonic()
        async for line in lines:
            got.append(line)
            if line == ": ping":
                break
        assert time.monotonic() - start < 2.4  # pinged before the first token
        async with run_client.stream("GET", url, headers=auth) as r2:
            assert r2.status_code == 200
            r3 = await run_client.get(url, headers=auth)
            assert_error(r3, 429, "too_many_streams")
            assert "retry-after" in r3.headers
    # slots are given back when streams close
    async with run_client.stream("GET", url, headers=auth) as r4:
        assert r4.status_code == 200


@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"time_to_first_token_ms": 60_000}, "lease_seconds": 1}],
)
async def test_a_run_whose_worker_vanished_is_requeued_or_failed(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    """A run held by a worker that stopped renewing: re-queued before any token,
    failed with its partial text after some."""
    from parley.store import run_records as run_store

    worker = run_services.worker
    assert worker is not None
    await worker.stop(grace=0)  # this process's worker takes nothing more
    chat_id = await new_chat(run_client, auth)
    a = await send_json(run_client, auth, chat_id, "a")
    b = await send_json(run_client, auth, chat_id, "b")
    from datetime import timedelta

    async with run_services.db.transaction() as s:
        for rid in (a["run_id"], b["run_id"]):
            assert await run_store.claim(
                s, run_id=rid, worker_id="ghost", lease=timedelta(seconds=0.5)
            )
    from parley.runs.events import delta_event

    await run_services.bus.append(b["run_id"], delta_event("partial ", 1))
    await run_services.bus.append(b["run_id"], delta_event("text", 1))
    async with run_client.stream("GET", f"/api/runs/{b['run_id']}/events", headers=auth) as r:
        evs = await collect(r)  # the waiting client gets its terminal event
    assert [e.event for e in evs][-2:] == ["error", "done"]
    assert evs[-1].data["status"] == "failed"
    run_b = (await run_client.get(f"/api/runs/{b['run_id']}", headers=auth)).json()
    assert run_b["error"]["code"] == "worker_lost"
    message = await stored_message(run_client, auth, chat_id, b["message_id"])
    assert (message["status"], message["content"]) == ("failed", "partial text")
    deadline = time.monotonic() + 5
    while True:
        run_a = (await run_client.get(f"/api/runs/{a['run_id']}", headers=auth)).json()
        if run_a["status"] == RunStatus.QUEUED:
            break
        assert time.monotonic() < deadline, run_a
        await asyncio.sleep(0.05)
    # a new worker picks the re-queued run up and finishes it; the failed one stays failed
    fresh = Worker(
        run_services.db,
        run_services.bus,
        FakeEngine(FakeEngineConfig(time_to_first_token=0, inter_token_latency=0)),
        run_services.finisher,
        run_services.settings,
        concurrency=2,
    )
    task = asyncio.create_task(fresh.run_forever())
    try:
        run_a = await wait_run(run_client, auth, a["run_id"])
    finally:
        await fresh.stop(grace=1)
        task.cancel()
    assert run_a["status"] == "completed"
    assert (await wait_run(run_client, auth, b["run_id"]))["status"] == "failed"
