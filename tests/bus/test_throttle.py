"""Attempt throttles on every Bus implementation: the schedule, refusal or slowing,
forgetting, concurrency, and (Redis) the key's layout."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import pytest

from parley.bus.interface import Backoff, Bus, BusLimits
from tests.builders import REDIS_URL, make_bus

# two free attempts, then 1 s, 2 s, 4 s … (at most 8 s) between attempts
SLOW = Backoff(free=2, max_delay=8, forget_after=60)


def test_the_schedule_doubles_up_to_the_cap() -> None:
    assert [SLOW.delay(n) for n in range(7)] == [0, 0, 1, 2, 4, 8, 8]
    assert SLOW.delay(10_000) == 8
    assert Backoff(free=1, max_delay=900, forget_after=60).lifetime == 900
    with pytest.raises(ValueError, match="backoff"):
        Backoff(free=1, max_delay=0, forget_after=60)


async def test_free_attempts_then_refusals_that_record_nothing(bus: Bus) -> None:
    first = await bus.attempt("k", SLOW)
    assert (first.allowed, first.attempts, first.wait) == (True, 1, 0)
    assert (await bus.attempt("k", SLOW)).attempts == 2
    refused = await bus.attempt("k", SLOW)
    assert not refused.allowed
    assert refused.attempts == 2  # not recorded
    assert refused.wait == pytest.approx(1, abs=0.1)
    again = await bus.attempt("k", SLOW)
    assert not again.allowed and again.attempts == 2


async def test_an_attempt_on_time_is_recorded_and_the_next_waits_longer(bus: Bus) -> None:
    quick = Backoff(free=1, max_delay=0.4, forget_after=60)  # delays of 0.4 s (capped)
    assert (await bus.attempt("k", quick)).allowed
    refused = await bus.attempt("k", quick)
    assert not refused.allowed
    assert 0.3 <= refused.wait <= 0.4
    await asyncio.sleep(refused.wait + 0.05)
    later = await bus.attempt("k", quick)
    assert later.allowed and later.attempts == 2


async def test_refuse_false_records_an_early_attempt_and_says_how_early(bus: Bus) -> None:
    for _ in range(2):
        await bus.attempt("k", SLOW, refuse=False)
    early = await bus.attempt("k", SLOW, refuse=False)
    assert early.allowed and early.attempts == 3
    assert early.wait == pytest.approx(1, abs=0.1)
    later = await bus.attempt("k", SLOW, refuse=False)
    assert later.attempts == 4
    assert later.wait == pytest.approx(3, abs=0.1)  # 2 s after the early one goes ahead
    for _ in range(5):  # however many come at once, none is held past the cap
        held = await bus.attempt("k", SLOW, refuse=False)
        assert held.wait <= 8
    assert held.wait == pytest.approx(8, abs=0.1)


async def test_keys_are_apart_and_forgetting_clears_one(bus: Bus) -> None:
    for _ in range(2):
        await bus.attempt("a", SLOW)
        await bus.attempt("b", SLOW)
    await bus.forget_attempts("a")
    await bus.forget_attempts("never seen")
    assert (await bus.attempt("a", SLOW)).attempts == 1
    assert not (await bus.attempt("b", SLOW)).allowed


async def test_reading_a_count_records_nothing_and_sees_forgetting_and_lifetime(bus: Bus) -> None:
    brief = Backoff(free=5, max_delay=0.2, forget_after=0.3)
    assert await bus.attempts("k") == 0
    for _ in range(3):
        await bus.attempt("k", brief)
    assert await bus.attempts("k") == await bus.attempts("k") == 3
    await bus.forget_attempts("k")
    assert await bus.attempts("k") == 0
    await bus.attempt("k", brief)
    assert await bus.attempts("k") == 1
    await asyncio.sleep(0.45)
    assert await bus.attempts("k") == 0


async def test_a_record_is_forgotten_after_its_lifetime(bus: Bus) -> None:
    brief = Backoff(free=1, max_delay=0.2, forget_after=0.3)
    await bus.attempt("k", brief)
    assert not (await bus.attempt("k", brief)).allowed
    await asyncio.sleep(0.45)
    fresh = await bus.attempt("k", brief)
    assert fresh.allowed and fresh.attempts == 1


async def test_a_concurrent_burst_gets_only_the_free_attempts(
    bus_kind: str, bus_limits: BusLimits
) -> None:
    """50 attempts at once from two bus clients: exactly the free ones pass."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    first = await make_bus(bus_kind, bus_limits, namespace)
    second = first if bus_kind == "memory" else await make_bus(bus_kind, bus_limits, namespace)
    try:
        backoff = Backoff(free=5, max_delay=60, forget_after=60)
        tries = [(first if i % 2 else second).attempt("k", backoff) for i in range(50)]
        results = await asyncio.gather(*tries)
        assert sum(r.allowed for r in results) == 5
    finally:
        await first.close()
        if second is not first:
            await second.close()


async def test_redis_keeps_a_hashed_key_with_a_ttl_under_its_own_tag(
    bus_limits: BusLimits,
) -> None:
    """Redis only: the key layout (the memory bus has no keys)."""
    import redis.asyncio as aioredis

    namespace = f"test-{uuid.uuid4().hex[:12]}"
    bus = await make_bus("redis", bus_limits, namespace)
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    name = "login:ada@example.com|198.51.100.7"
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    key = f"{namespace}:throttle:{{{digest}}}:attempts"
    try:
        await bus.attempt(name, Backoff(free=1, max_delay=900, forget_after=60))
        assert await client.hget(key, "n") == "1"
        assert 899_000 < await client.pttl(key) <= 900_000  # the longest delay outlives 60 s
        assert [k async for k in client.scan_iter(f"{namespace}:*")] == [key]  # no email in it
        await bus.forget_attempts(name)
        assert not await client.exists(key)
    finally:
        await client.aclose()
        await bus.close()
