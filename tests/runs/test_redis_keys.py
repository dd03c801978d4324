"""What a run leaves in Redis: every key but the queue expires, and streams stay near
``stream_maxlen``, after a send, a stop and a resume."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from parley.bus.redis import RedisBus
from parley.services import Services
from tests.builders import REDIS_URL, truncate
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.sse import collect, events

MAXLEN = 600  # above the tier's max_output_tokens (settings insist)


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "stream_maxlen": MAXLEN,
        "fake_engine": {"output_tokens": 500, "inter_token_latency_ms": 0},
        "default_tier": "one",
        "tiers": {
            "one": {
                "priority": 0,
                "tokens_per_minute": 1000,
                "burst_tokens": 100_000,
                "max_concurrent_runs": 4,
                "max_output_tokens": 500,
            }
        },
    }


@pytest.fixture
def stack(postgres_url: str) -> tuple[str, str]:
    """Postgres and Redis only: this is about the Redis bus's keys."""
    asyncio.run(truncate(postgres_url))
    return postgres_url, "redis"


async def test_every_key_but_the_queue_expires_and_streams_stay_near_maxlen(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    bus = run_services.bus
    assert isinstance(bus, RedisBus)
    chat_id = await new_chat(run_client, auth)
    # a whole answer, streamed
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers=auth
    ) as r:
        whole = await collect(r)
    assert whole[-1].data["status"] == "completed"
    # a stopped one
    stopped = await send_json(run_client, auth, chat_id, "again")
    await run_client.post(f"/api/chats/{chat_id}/runs/{stopped['run_id']}/cancel", headers=auth)
    assert (await wait_run(run_client, auth, stopped["run_id"]))["status"] == "cancelled"
    # a resumed one
    run_id = whole[0].data["run_id"]
    resume = {**auth, "Last-Event-ID": str(whole[len(whole) // 2].id)}
    async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=resume) as r:
        rest = [e async for e in events(r)]
    assert rest[-1].event == "done"

    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        keys = [k async for k in client.scan_iter(match=f"{bus.namespace}:*")]
        ttls = {k: await client.pttl(k) for k in keys}
        lengths = {k: await client.xlen(k) for k in keys if k.endswith(":events")}
    finally:
        await client.aclose()
    queue = {f"{bus.namespace}:{{queue}}:z", f"{bus.namespace}:{{queue}}:seq"}
    kinds = {k.rsplit(":", 1)[1] for k in keys}
    assert {"events", "fence", "cancel", "budget"} <= kinds, keys
    assert {k: t for k, t in ttls.items() if k not in queue and t < 0} == {}
    # a 500-token answer is all there (no trimming below what a run appends) and no stream
    # grows past MAXLEN
    assert lengths and all(n <= MAXLEN for n in lengths.values()), lengths
    assert max(lengths.values()) >= 500
