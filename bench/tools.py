"""parley's own time per tool round (issue 43): everything a round costs but the tool and the
model — the calls read out of the stream, their events appended, the results checked by
the input policy, the next step's prompt and request, the extra model step's admission-free
start.

    .venv/bin/python bench/tools.py [--rounds 10] [--trials 30]
        [--database-url postgresql+asyncpg://postgres@127.0.0.1/parley_bench_tools
         --redis-url redis://127.0.0.1:6379/0]   # the scaled-out stack's store and bus

In one process (SQLite, the in-process bus, the fake engine answering at once): a chat's
run that calls ``search_chats`` at every step for ``--rounds`` rounds (``/call-forever``),
beside the same chat's plain run (one model step, no tools), ``--trials`` times each,
alternating; each run's own duration read from its record (started → finished: no
polling in it). The tool's own time is measured by calling it directly as many times. Per
round: (tool run - plain run - rounds * tool call) / rounds. Prints p50 and p99 of that
against the goal (≤ 20 ms p50), and a 10-round chat's whole overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from parley.api.app import create_app
from parley.config import load_settings
from parley.services import build_services
from parley.store.database import Database
from parley.store.migrate import upgrade
from parley.tiers import default_tiers
from parley.tools.interface import ToolContext
from parley.tools.own_chats import SearchChats

GOAL_P50_MS = 20.0
QUERY = {"query": "heron nest"}


def settings(folder: Path, rounds: int, database_url: str | None, redis_url: str | None) -> Any:
    tiers = {
        name: {
            **tier.model_dump(mode="json"),
            "max_concurrent_runs": 1000,
            "burst_tokens": 100_000_000,
            "tokens_per_minute": 100_000_000,
            "max_tool_rounds": rounds,
            "max_tool_seconds": 600,
            "moderation": {"input": ["rules"], "output": []},
        }
        for name, tier in default_tiers().items()
    }
    return load_settings(
        data_dir=folder,
        database={"url": database_url} if database_url else None,
        bus={"redis_url": redis_url, "redis_namespace": "bench-tools"} if redis_url else None,
        engines={
            "kind": "fake",
            "fake": {"time_to_first_token_ms": 0, "inter_token_latency_ms": 0, "output_tokens": 8},
        },
        qos={"tiers": tiers, "default_tier": "free"},
        safety={
            "classifiers": {"rules": {"kind": "rules", "categories": {}, "prompt_injection": True}}
        },
    )


async def fresh_postgres(url: str) -> None:
    """The bench's own database, made again empty (never the tests' ``test``)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    base, name = url.rsplit("/", 1)
    assert name != "test", "the bench makes its own database"
    admin = create_async_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()


async def duration(client: httpx.AsyncClient, auth: dict[str, str], run_id: str) -> float:
    while True:
        run = (await client.get(f"/api/runs/{run_id}", headers=auth)).json()
        if run["status"] in ("completed", "failed", "cancelled", "rejected"):
            assert run["status"] == "completed", run
            started = datetime.fromisoformat(run["started_at"])
            return (datetime.fromisoformat(run["finished_at"]) - started).total_seconds()
        await asyncio.sleep(0.01)


async def send(
    client: httpx.AsyncClient, auth: dict[str, str], chat: str, content: str, **body: Any
) -> float:
    r = await client.post(
        f"/api/chats/{chat}/messages",
        json={"content": content, **body},
        headers={**auth, "Accept": "application/json"},
    )
    assert r.status_code == 202, r.text
    return await duration(client, auth, r.json()["run_id"])


async def main(rounds: int, trials: int, database_url: str | None, redis_url: str | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="parley-bench-tools-"))
    s = settings(folder, rounds, database_url, redis_url)
    if database_url and database_url.startswith("postgresql"):
        await fresh_postgres(database_url)
    db = Database(s.database.url)
    await upgrade(db)
    await db.dispose()
    svc = build_services(s, worker=True)
    await svc.start()
    transport = httpx.ASGITransport(app=create_app(svc, close_services=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        token = (
            await client.post(
                "/api/auth/signup",
                json={"email": "bench@example.com", "password": "correct horse battery staple"},
            )
        ).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        chat = (await client.post("/api/chats", json={"title": "bench"}, headers=auth)).json()["id"]
        for _ in range(20):  # something for the tool to find
            await send(client, auth, chat, "/echo herons nest in colonies high in trees")
        call = "/call-forever search_chats " + json.dumps(QUERY)
        me = (await client.get("/api/me", headers=auth)).json()["user"]["id"]
        search = SearchChats(svc.db, svc.cursors)
        context = ToolContext(me, chat, "bench")
        per_round, wholes = [], []
        for _ in range(trials):
            plain = await send(client, auth, chat, "/echo fine")
            tooled = await send(client, auth, chat, call, tools=["search_chats"])
            started = time.perf_counter()
            for _ in range(rounds):
                await search.call(QUERY, context)
            tool = time.perf_counter() - started
            overhead = tooled - plain - tool
            wholes.append(overhead)
            per_round.append(overhead / rounds)
    await svc.close(grace=1)
    ms = sorted(x * 1000 for x in per_round)
    p50, p99 = statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    store = "Postgres" if database_url else "SQLite"
    bus = "Redis" if redis_url else "in-process bus"
    print(f"{trials} trials of {rounds} tool rounds ({store}, {bus}, fake engine)")
    verdict = "met" if p50 <= GOAL_P50_MS else "NOT met"
    print(f"parley's time per tool round: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"(goal p50 <= {GOAL_P50_MS:g} ms: {verdict})")
    print(f"a {rounds}-round chat's whole overhead: p50 {statistics.median(wholes) * 1000:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.trials, args.database_url, args.redis_url))
