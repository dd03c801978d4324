"""Per-user concurrency across processes: two `api` processes and a `worker` on Postgres +
Redis. The slots are exact whichever api a send reaches, and a killed worker's runs give
their slots back within the lease."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import BACKENDS, REDIS_URL, truncate
from tests.processes import Cluster, cluster_env
from tests.sse import events
from tests.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("postgres" not in BACKENDS, reason="needs Postgres"),
]

K = 3
LEASE = 2.0
TIERS = {
    "free": {
        "priority": 0,
        "tokens_per_minute": 1_000_000,
        "burst_tokens": 1_000_000,
        "max_concurrent_runs": K,
        "max_output_tokens": 200,
    }
}


@pytest.fixture
def cluster(postgres_url: str, tmp_path: Path) -> Iterator[Cluster]:
    asyncio.run(truncate(postgres_url))
    env = cluster_env(
        postgres_url,
        REDIS_URL,
        PARLEY_TIERS=json.dumps(TIERS),
        PARLEY_LEASE_SECONDS=str(LEASE),
        PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS="20",
        PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS="100",
        PARLEY_FAKE_ENGINE__OUTPUT_TOKENS="150",
    )
    c = Cluster(env, tmp_path)
    yield c
    for proc in c.procs:
        proc.stop()


async def send(c: httpx.AsyncClient, auth: dict[str, str], chat_id: str) -> httpx.Response:
    return await c.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hi"},
        headers={**auth, "Accept": "application/json"},
    )


async def first_delta(c: httpx.AsyncClient, auth: dict[str, str], run_id: str) -> None:
    async with c.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        async for ev in events(r):
            if ev.event == "delta":
                return


async def test_k_runs_at_once_across_two_apis_and_a_killed_workers_slots_come_back(
    cluster: Cluster,
) -> None:
    (_, base_a), (_, base_b) = cluster.api(), cluster.api()
    worker = cluster.worker()
    async with (
        httpx.AsyncClient(base_url=base_a, timeout=30) as a,
        httpx.AsyncClient(base_url=base_b, timeout=30) as b,
    ):
        r = await a.post(
            "/api/auth/signup", json={"email": "ada@example.com", "password": "long password"}
        )
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        chats = [
            (await a.post("/api/chats", json={}, headers=auth)).json()["id"] for _ in range(101)
        ]
        answers = await asyncio.gather(
            *(send(a if i % 2 else b, auth, chat) for i, chat in enumerate(chats[:100]))
        )
        made = [r.json()["run_id"] for r in answers if r.status_code == 202]
        refused: list[dict[str, Any]] = [r.json() for r in answers if r.status_code == 429]
        assert len(made) == K and len(refused) == 100 - K, [r.text for r in answers][:5]
        assert {e["error"]["code"] for e in refused} == {"too_many_runs"}
        await asyncio.gather(*(first_delta(a, auth, run_id) for run_id in made))  # running
        worker.kill()
        killed = time.monotonic()

        async def a_slot_again() -> httpx.Response | None:
            r = await send(b, auth, chats[100])
            return r if r.status_code == 202 else None

        await eventually(a_slot_again, "a slot to come back after the worker died", timeout=20)
        back = time.monotonic() - killed
        # the runs' slots lapse one lease after their last renewal (a third of a lease
        # before the kill at most), or the sweeper ends the runs as their leases lapse
        print(f"a slot came back {back:.2f} s after the worker was killed (lease {LEASE} s)")
        assert back < 3 * LEASE, back  # (a lease and a sweep: x3 holds on a loaded machine)
        for run_id in made:
            run = (await a.get(f"/api/runs/{run_id}", headers=auth)).json()
            assert run["status"] in ("running", "failed"), run
