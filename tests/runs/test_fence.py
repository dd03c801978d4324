"""A worker meets a raised fence (issue 40), in process, on both run stacks: the run's
stream fence is raised past the worker's attempt (as the sweeper raises it when it takes a
run back) before the worker's first token. The worker's appends are refused, it says so
and stops; nothing of its attempt reaches the stream; the run, taken back, is answered by
its next attempt, and a client reading the stream from the start reads exactly the stored
answer with one ``done``."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from parley.bus.interface import EventKind
from parley.services import Services
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import events, text_of
from tests.waiting import eventually


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    # time to raise the fence between the claim and the first token; a lease short enough
    # that the sweeper takes the run back soon after the stale attempt gives it up, long
    # enough that the next attempt keeps it on a loaded machine (at 2 s, a CI run at load
    # ~6 lost attempt 2's lease too, and the run failed mid-stream)
    return {"fake_engine": {"time_to_first_token_ms": 1500}, "lease_seconds": 5}


async def test_a_worker_whose_fence_was_raised_appends_nothing_and_stops(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    caplog: pytest.LogCaptureFixture,
) -> None:
    chat_id = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat_id, "hello", max_tokens=12)
    run_id = sent["run_id"]

    async def running() -> bool:
        run = (await run_client.get(f"/api/runs/{run_id}", headers=auth)).json()
        return bool(run["status"] == "running")

    await eventually(running, "the worker to claim the run")
    with caplog.at_level(logging.WARNING, logger="parley.runs.worker"):
        await run_services.bus.raise_fence(run_id, 2)  # as the sweeper does, taking it back

        async def refused() -> bool:
            return f"run {run_id}: attempt 1 is stale; stopping" in caplog.text

        await eventually(refused, "the worker's first append to be refused")
    entries = await run_services.bus.read(run_id, None, timeout=0)
    kinds = [(e.event.kind, e.event.data.get("status")) for e in entries]
    # queued, and running if its append came before the fence: nothing of the answer
    assert kinds in (
        [(EventKind.STATUS, "queued")],
        [(EventKind.STATUS, "queued"), (EventKind.STATUS, "running")],
    ), kinds

    run = await wait_run(run_client, auth, run_id)
    assert run["status"] == "completed", run
    async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        seen = [ev async for ev in events(r)]
    assert [e.event for e in seen].count("done") == 1
    message = await stored_message(run_client, auth, chat_id, run["message_id"])
    assert text_of(seen) == message["content"] and message["content"]
