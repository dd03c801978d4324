"""Lease renewal: a worker keeps the runs it holds, and gives up only those taken back."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.engines.fake import FakeEngine
from parley.runs.finisher import Guard
from parley.services import Services
from parley.store import run_records
from parley.store.run_ends import Outcome
from parley.store.schema import Run
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.sse import collect
from tests.waiting import eventually


async def _running(client: httpx.AsyncClient, auth: dict[str, str], run_id: str) -> bool:
    run = (await client.get(f"/api/runs/{run_id}", headers=auth)).json()
    return bool(run["status"] == "running")


# Postgres only: SQLite transactions take turns in one process, so no run can be claimed
# while a renewal's transaction is open
@pytest.mark.parametrize("stack", ["postgres-redis"], indirect=True)
async def test_a_run_claimed_while_leases_are_renewed_is_kept(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, engine = run_services.worker, run_services.engine
    assert worker is not None and isinstance(engine, FakeEngine)
    engine.config = replace(engine.config, inter_token_latency=0.01, output_tokens=150)
    first = await send_json(run_client, auth, await new_chat(run_client, auth), "first")
    await eventually(lambda: _running(run_client, auth, first["run_id"]), "the first run")
    second_chat = await new_chat(run_client, auth)
    made: dict[str, Any] = {}
    renew = run_records.renew_leases

    async def overtaken(s: AsyncSession, *, worker_id: str, lease: Any) -> set[str]:
        """The renewal's UPDATE has run; a second run is made and claimed before it ends."""
        held: set[str] = await renew(s, worker_id=worker_id, lease=lease)
        made.update(await send_json(run_client, auth, second_chat, "second"))
        await eventually(lambda: _running(run_client, auth, made["run_id"]), "the second run")
        return held

    monkeypatch.setattr(run_records, "renew_leases", overtaken)
    await worker.renew_leases()
    monkeypatch.undo()
    second = await wait_run(run_client, auth, made["run_id"])
    assert second["status"] == "completed", second
    async with run_client.stream("GET", f"/api/runs/{made['run_id']}/events", headers=auth) as r:
        events = await collect(r)
    statuses = [e.data["status"] for e in events if e.event == "status"]
    assert statuses == ["queued", "running"]  # never given up, never re-queued
    assert not [e for e in events if e.event == "error"]


@pytest.mark.parametrize("stack", ["postgres-redis"], indirect=True)
@pytest.mark.parametrize("run_overrides", [{"lease_seconds": 1}])
async def test_a_run_whose_end_cannot_be_stored_yet_keeps_its_lease(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's final write fails for three leases (the primary failing over; the
    database answers everything else): the worker retries it holding the run's lease, so
    the sweeper, which reaches the database all along, never takes the run back, and the
    answer is stored once, completed."""
    finisher = run_services.finisher
    finish = finisher.finish
    failing_until = time.monotonic() + 3.0
    refused: list[str] = []

    async def failing_over(run_id: str, outcome: Outcome, guard: Guard) -> Run | None:
        if guard.worker_id is not None and time.monotonic() < failing_until:
            refused.append(run_id)
            raise OperationalError("COMMIT", None, ConnectionRefusedError("failing over"))
        return await finish(run_id, outcome, guard)

    monkeypatch.setattr(finisher, "finish", failing_over)
    sent = await send_json(run_client, auth, await new_chat(run_client, auth))
    run = await wait_run(run_client, auth, sent["run_id"])
    assert run["status"] == "completed", run
    assert len(refused) >= 3 and time.monotonic() >= failing_until
    async with run_client.stream("GET", f"/api/runs/{sent['run_id']}/events", headers=auth) as r:
        events = await collect(r)
    assert [e.data["status"] for e in events if e.event == "status"] == ["queued", "running"]
    assert events[-1].event == "done" and not [e for e in events if e.event == "error"]


@pytest.mark.parametrize("stack", ["postgres-redis"], indirect=True)
@pytest.mark.parametrize("run_overrides", [{"lease_seconds": 1}])
async def test_a_final_write_that_fails_for_its_own_sake_is_not_retried_for_ever(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's final write fails with an error of the write itself (a constraint, not
    an outage): retrying cannot help, so the worker stops holding the run, whose lease then
    lapses and the sweeper ends it ``failed`` with the text that was streamed."""
    finisher = run_services.finisher
    finish = finisher.finish
    refused: list[str] = []

    async def broken(run_id: str, outcome: Outcome, guard: Guard) -> Run | None:
        if guard.worker_id is not None:
            refused.append(run_id)
            raise IntegrityError("UPDATE runs", None, ValueError("a broken constraint"))
        return await finish(run_id, outcome, guard)

    monkeypatch.setattr(finisher, "finish", broken)
    sent = await send_json(run_client, auth, await new_chat(run_client, auth))
    run = await wait_run(run_client, auth, sent["run_id"], timeout=20)
    assert run["status"] == "failed" and run["error"]["code"] == "worker_lost", run
    assert refused == [sent["run_id"]]  # tried once, not again and again
    message = (await run_client.get(f"/api/chats/{run['chat_id']}/messages", headers=auth)).json()
    answer = next(m for m in message["data"] if m["role"] == "assistant")
    assert answer["content"] and len(answer["content"].split()) == 24  # streamed, then kept
