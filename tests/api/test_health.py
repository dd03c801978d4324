"""Liveness and readiness: ``/healthz`` and ``/readyz`` with its checks."""

from __future__ import annotations

from pathlib import Path

import httpx

from parley.services import Services
from parley.store.database import Database


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok", "reason": None}
    assert (await client.get("/readyz")).json() == {
        "status": "ready",
        "checks": {"store": "ok", "bus": "ok", "tasks": "ok"},
    }


async def test_readiness_reports_a_dead_store(
    client: httpx.AsyncClient, services: Services, tmp_path: Path
) -> None:
    url = services.db.engine.url
    # a directory is no SQLite database; nothing listens on port 1
    broken = (
        url.set(port=1)
        if url.get_backend_name() == "postgresql"
        else url.set(database=str(tmp_path))
    )
    await services.db.dispose()
    services.db = Database(broken.render_as_string(hide_password=False))
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "not_ready"
    assert r.json()["checks"]["store"].startswith("error")
