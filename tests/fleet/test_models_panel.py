"""The admin console's models panel (issue 44): parley in front of a fleet of two real
replicas, one of which is then stopped; the panel, read through `GET /api/admin/models`,
shows the model's engine reported by the worker, both replicas, and the stopped one turning
unhealthy as the router finds it down — and an ordinary user is refused the panel."""

from __future__ import annotations

from typing import Any

from parley.domain import UserRole
from tests.accounts.test_audit import make
from tests.fleet.conftest import FLEET_MODEL, Fleet
from tests.fleet.servers import EngineReplica
from tests.helpers import user_headers
from tests.waiting import eventually

FAST_REPORTS = {"observability": {"metrics_sample_seconds": 0.2}}


async def test_the_panel_shows_each_replica_and_its_health(fleet: Fleet, replicas: Any) -> None:
    one, two = replicas(2)
    assert isinstance(two, EngineReplica)
    async with fleet([one.url, two.url], more=FAST_REPORTS) as front:
        admin = await user_headers(front.client, "root@example.com")
        await make(front.services, "root@example.com", UserRole.ADMIN)
        r = await front.client.get("/api/admin/models", headers=front.auth)
        assert r.status_code == 403, r.text

        async def panel(healthy: set[bool]) -> dict[str, Any] | None:
            r = await front.client.get("/api/admin/models", headers=admin)
            assert r.status_code == 200, r.text
            (model,) = [m for m in r.json()["data"] if m["model"] == FLEET_MODEL]
            engines = model["engines"]
            if not engines:
                return None
            seen = {rep["url"]: rep["healthy"] for rep in engines[0]["replicas"]}
            return model if set(seen.values()) == healthy and len(seen) == 2 else None

        model = await eventually(lambda: panel({True}), "both replicas reported healthy")
        (engine,) = model["engines"]
        assert engine["state"] == "ready" and not engine["stale"]
        assert engine["worker_id"] == front.services.worker.worker_id  # type: ignore[union-attr]
        two.stop()  # the router's health probes find it down
        model = await eventually(lambda: panel({True, False}), "the stopped one unhealthy")
        down = [r for r in model["engines"][0]["replicas"] if not r["healthy"]]
        assert [r["url"] for r in down] == [two.url]
