"""The relay through HTTP: rejoining a run's events, exact resumption after cuts, disconnects
that do not cancel, expired streams, keep-alive pings and the bound on open streams."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import httpx
import pytest

from parley.services import Services
from tests.helpers import assert_error
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import Event, collect, events, text_of
from tests.waiting import eventually


async def test_json_clients_get_202_and_rejoin_with_events(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    assert accepted["status"] == "running"  # this process's idle worker took it at once
    async with run_client.stream(
        "GET", f"/api/runs/{accepted['run_id']}/events", headers=auth
    ) as r:
        evs = await collect(r)
    assert evs[-1].event == "done"
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert text_of(evs) == message["content"]


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
            # 24 deltas and 4 statuses, at least one event a connection: a stream that never
            # reaches `done` is resumed from the wrong place
            assert cuts <= 30, f"no done after {cuts} resumes: {[e.event for e in seen][:40]}"
            if rng.random() < 0.5:  # pacing: some reconnects come a little later
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


@pytest.mark.parametrize("run_overrides", [{"stream_ttl_seconds": 1}])
async def test_an_expired_stream_gives_the_stored_message_and_done(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    await wait_run(run_client, auth, accepted["run_id"])

    async def expired() -> bool:
        return not await run_services.bus.stream_exists(accepted["run_id"])

    await eventually(expired, "the run's event stream to expire")
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
            "fake_engine": {"time_to_first_token_ms": 30_000, "slots": 4},
            "ping_interval_seconds": 1.5,
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
        async for line in lines:
            got.append(line)
            if line == ": ping":
                break
        # pinged while idle: before the first token (30 s away), nothing but the status
        assert not any(line.startswith("event: delta") for line in got), got
        async with run_client.stream("GET", url, headers=auth) as r2:
            assert r2.status_code == 200
            r3 = await run_client.get(url, headers=auth)
            assert_error(r3, 429, "too_many_streams")
            # the server's value (the ping interval, 1.5 s, rounded up), not the header's floor
            assert r3.headers["retry-after"] == str(math.ceil(1.5))
    # slots are given back when streams close
    async with run_client.stream("GET", url, headers=auth) as r4:
        assert r4.status_code == 200
