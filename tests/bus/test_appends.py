"""The Redis bus's batched appends (``bus/redis/appends.py``) on the real Redis: many runs'
appends share one round trip (one script call) per flush (those queued while one is out go in the
next), each caller still gets its own entry id (in order per stream), a stale attempt is
refused alone, and a script flushed from the server is loaded again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from parley.bus.interface import BusLimits, EventKind, RunEvent, StaleAttempt
from parley.bus.redis import RedisBus
from tests.builders import BUS_BACKENDS, REDIS_URL

pytestmark = pytest.mark.skipif("redis" not in BUS_BACKENDS, reason="the Redis bus's own")


def delta(i: int) -> RunEvent:
    return RunEvent(EventKind.DELTA, {"text": f"t{i}", "tokens": 1})


class RoundTrips:
    """Counts the script calls and pipelines the bus's client sends (its round trips)."""

    def __init__(self, bus: RedisBus) -> None:
        self.count = 0
        make = bus._redis.pipeline
        evalsha = bus._redis.evalsha

        def counted(*args: Any, **kwargs: Any) -> Any:
            pipe = make(*args, **kwargs)
            execute = pipe.execute

            async def execute_counted(*a: Any, **kw: Any) -> Any:
                self.count += 1
                return await execute(*a, **kw)

            pipe.execute = execute_counted  # type: ignore[method-assign]
            return pipe

        async def evalsha_counted(*args: Any) -> Any:
            # a call refused NOSCRIPT (another test flushed the server's scripts) is sent
            # again once loaded: one trip, as counted
            self.count += 1
            try:
                return await evalsha(*args)
            except NoScriptError:
                self.count -= 1
                raise

        bus._redis.pipeline = counted  # type: ignore[method-assign]
        bus._redis.evalsha = evalsha_counted  # type: ignore[method-assign,assignment]


async def make(batching: bool) -> RedisBus:
    limits = BusLimits(stream_maxlen=1000, stream_ttl_seconds=60, append_batching=batching)
    bus = RedisBus(REDIS_URL, limits, namespace=f"test-{uuid.uuid4().hex[:12]}")
    await bus.ping()
    return bus


@pytest.fixture
async def batched() -> AsyncIterator[RedisBus]:
    bus = await make(True)
    yield bus
    await bus.close()


async def test_many_runs_appends_share_few_round_trips_and_keep_their_order(
    batched: RedisBus,
) -> None:
    trips = RoundTrips(batched)
    runs = [f"run_{i}" for i in range(50)]

    async def stream(run_id: str) -> list[str]:
        return [await batched.append(run_id, delta(i), fence=1) for i in range(8)]

    ids = await asyncio.gather(*(stream(r) for r in runs))
    assert trips.count <= 8 * 3  # about one flush per token step of all 50 runs (not 400)
    for run_id, appended in zip(runs, ids, strict=True):
        entries = await batched.read(run_id, None, timeout=0)
        assert [e.id for e in entries] == appended
        assert [e.event.data["text"] for e in entries] == [f"t{i}" for i in range(8)]


async def test_without_batching_each_append_is_its_own_round_trip() -> None:
    bus = await make(False)
    try:
        trips = RoundTrips(bus)
        await asyncio.gather(*(bus.append(f"run_{i}", delta(0)) for i in range(10)))
        assert trips.count == 10
    finally:
        await bus.close()


async def test_a_stale_attempt_in_a_batch_is_refused_alone(batched: RedisBus) -> None:
    await batched.raise_fence("run_a", 2)
    results = await asyncio.gather(
        batched.append("run_a", delta(0), fence=1),
        batched.append("run_a", delta(1), fence=2),
        batched.append("run_b", delta(2), fence=1),
        return_exceptions=True,
    )
    assert isinstance(results[0], StaleAttempt)
    assert all(isinstance(r, str) for r in results[1:])
    assert [e.event.data["text"] for e in await batched.read("run_a", None, timeout=0)] == ["t1"]


async def test_a_script_flushed_from_the_server_is_loaded_again(batched: RedisBus) -> None:
    await batched.append("run_a", delta(0))
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        await admin.script_flush()
    finally:
        await admin.aclose()
    appended = await asyncio.gather(*(batched.append("run_a", delta(i)) for i in (1, 2)))
    entries = await batched.read("run_a", None, timeout=0)
    assert [e.id for e in entries][1:] == appended


async def test_appends_waiting_when_the_bus_closes_fail_instead_of_hanging() -> None:
    bus = await make(True)
    waiting = [asyncio.create_task(bus.append("run_a", delta(i))) for i in range(3)]
    await asyncio.sleep(0)  # queued, the flusher not run yet
    await bus.close()
    results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
    assert all(isinstance(r, str | RedisConnectionError) for r in results), results
    assert any(isinstance(r, RedisConnectionError) for r in results)


async def test_a_call_that_errors_in_a_batch_fails_alone(batched: RedisBus) -> None:
    """A stream key that holds something else (a wrong type): that append fails with Redis's
    error, the others of its batch go in."""
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        await admin.set(batched._run_key("run_bad", "events"), "not a stream")
    finally:
        await admin.aclose()
    results = await asyncio.gather(
        batched.append("run_a", delta(0)),
        batched.append("run_bad", delta(1)),
        batched.append("run_b", delta(2)),
        return_exceptions=True,
    )
    assert isinstance(results[1], ResponseError) and "WRONGTYPE" in str(results[1])
    assert isinstance(results[0], str) and isinstance(results[2], str)
    assert [e.event.data["text"] for e in await batched.read("run_b", None, timeout=0)] == ["t2"]


async def test_a_fenced_append_keeps_the_stream_and_its_fence_for_the_streams_lifetime(
    batched: RedisBus,
) -> None:
    """Alone and batched, the fence lives as long as the stream (its TTL, not its length)."""
    await batched.append("run_a", delta(0), fence=1)
    await asyncio.gather(*(batched.append(f"run_{i}", delta(0), fence=1) for i in range(5)))
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        for run_id in ["run_a", *(f"run_{i}" for i in range(5))]:
            for suffix in ("events", "fence"):
                ttl_ms = await admin.pttl(batched._run_key(run_id, suffix))
                assert 50_000 < ttl_ms <= 60_000, (run_id, suffix, ttl_ms)
    finally:
        await admin.aclose()
