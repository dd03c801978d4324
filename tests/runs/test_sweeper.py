"""The sweeper through HTTP: a run whose worker vanished is re-queued, or failed with its
partial text."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from parley.context.summaries import Summaries
from parley.domain import RunStatus
from parley.engines.fake import FakeEngine, FakeEngineConfig
from parley.runs.generation import Prompting
from parley.runs.worker import Worker
from parley.services import Services
from parley.tiers import TierSettings, default_tiers
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
    engine = FakeEngine(FakeEngineConfig(time_to_first_token=0, inter_token_latency=0))
    summaries = Summaries(run_services.db, run_services.bus, run_services.settings.context)
    fresh = Worker(
        run_services.db,
        run_services.bus,
        engine,
        run_services.finisher,
        run_services.settings.runs,
        qos=run_services.settings.qos,
        engines=run_services.settings.engines,
        admission=run_services.admission,
        prompting=Prompting(run_services.db, engine, run_services.context, summaries),
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


def _tiers_waiting(seconds: float) -> dict[str, TierSettings]:
    return {
        name: tier.model_copy(update={"max_queue_wait_seconds": seconds})
        for name, tier in default_tiers().items()
    }


@pytest.mark.parametrize(
    "run_overrides", [{"tiers": _tiers_waiting(0.5), "sweep_interval_seconds": 0.1}]
)
async def test_a_run_queued_past_its_tiers_wait_limit_is_rejected(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    """Nothing waits for ever: with no worker to take it, a run ends ``rejected`` once
    queued past its tier's limit, says why, leaves the queue and gives its tokens back."""
    worker = run_services.worker
    assert worker is not None
    await worker.stop(grace=0)  # this process's worker takes nothing more
    me = (await run_client.get("/api/me", headers=auth)).json()["user"]
    full = await run_services.budget.balance(me["id"], me["tier"])
    chat_id = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat_id, "anyone there?")
    assert sent["status"] == "queued"
    held = await run_services.budget.balance(me["id"], me["tier"])
    assert held.tokens < full.tokens  # the run holds a reservation while it waits
    run = await wait_run(run_client, auth, sent["run_id"])
    assert run["status"] == "rejected"
    assert run["error"]["code"] == "queue_wait_exceeded"
    assert "0.5 s" in run["error"]["message"]
    async with run_client.stream("GET", f"/api/runs/{sent['run_id']}/events", headers=auth) as r:
        evs = await collect(r)
    assert [e.event for e in evs][-2:] == ["error", "done"]
    assert evs[-2].data["code"] == "queue_wait_exceeded"
    message = await stored_message(run_client, auth, chat_id, sent["message_id"])
    assert message["status"] == "rejected"
    assert await run_services.bus.queue_length() == 0
    back = await run_services.budget.balance(me["id"], me["tier"])
    assert back.tokens >= full.tokens - 1  # given back (the bucket refills meanwhile too)
    # its wait is in the queue wait histogram: over the limit, and never started
    metrics = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families((await run_client.get("/metrics")).text)
        for s in family.samples
    }
    by = frozenset({"model": run["model"], "tier": me["tier"]}.items())
    assert metrics[("parley_queue_wait_seconds_count", by)] == 1
    assert metrics[("parley_queue_wait_seconds_sum", by)] >= 0.5
