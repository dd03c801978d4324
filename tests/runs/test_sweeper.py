"""The sweeper through HTTP: a run whose worker vanished is re-queued, or failed with its
partial text."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from parley.domain import RunStatus
from parley.engines.fake import FakeEngine, FakeEngineConfig
from parley.runs.worker import Worker
from parley.services import Services
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import collect
from tests.waiting import eventually


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

    async def a_requeued() -> bool:
        run_a = (await run_client.get(f"/api/runs/{a['run_id']}", headers=auth)).json()
        return bool(run_a["status"] == RunStatus.QUEUED)

    await eventually(a_requeued, "the sweeper to re-queue the run that had no token")
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
