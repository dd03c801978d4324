"""Lease renewal: a worker keeps the runs it holds, and gives up only those taken back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from parley.engines.fake import FakeEngine
from parley.services import Services
from parley.store import run_records
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
