"""Token buckets on every Bus implementation: reserve, settle, peek, refill, concurrency."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from parley.bus.interface import Bus, BusLimits, TokenBucket
from tests.builders import REDIS_URL, make_bus
from tests.waiting import eventually

# refills so slowly (1 token a minute) that a test never sees it, unless it wants to
STILL = TokenBucket(capacity=1000, per_minute=1)


async def test_a_bucket_starts_full(bus: Bus) -> None:
    balance = await bus.peek_tokens("u1", STILL)
    assert balance.tokens == 1000
    assert balance.seconds_to_full == 0
    assert balance.bucket == STILL


async def test_reserve_takes_what_the_balance_covers_and_nothing_else(bus: Bus) -> None:
    taken = await bus.reserve_tokens("u1", 600, STILL)
    assert taken.granted
    assert taken.balance.tokens == pytest.approx(400, abs=0.1)
    assert taken.retry_after == 0
    refused = await bus.reserve_tokens("u1", 500, STILL)
    assert not refused.granted
    assert refused.balance.tokens == pytest.approx(400, abs=0.1)  # untouched
    # 100 tokens short at one token a minute
    assert refused.retry_after == pytest.approx(100 * 60, rel=0.01)
    assert (await bus.peek_tokens("u1", STILL)).tokens == pytest.approx(400, abs=0.1)
    assert (await bus.reserve_tokens("u1", 400, STILL)).granted
    assert (await bus.peek_tokens("u1", STILL)).tokens == pytest.approx(0, abs=0.1)


async def test_users_have_their_own_buckets(bus: Bus) -> None:
    assert (await bus.reserve_tokens("u1", 1000, STILL)).granted
    assert not (await bus.reserve_tokens("u1", 10, STILL)).granted
    assert (await bus.reserve_tokens("u2", 1000, STILL)).granted


async def test_settle_refunds_up_to_the_capacity(bus: Bus) -> None:
    await bus.reserve_tokens("u1", 300, STILL)
    balance = await bus.settle_tokens("u1", reserved=300, used=120, bucket=STILL)
    assert balance.tokens == pytest.approx(880, abs=0.1)
    assert balance.seconds_to_full == pytest.approx(120 * 60, rel=0.01)
    # a refund never lifts the balance above the capacity
    full = await bus.settle_tokens("u1", reserved=500, used=0, bucket=STILL)
    assert full.tokens == 1000
    assert (await bus.peek_tokens("u1", STILL)).tokens == 1000


async def test_an_overrun_debits_below_zero_and_blocks_until_refilled(bus: Bus) -> None:
    await bus.reserve_tokens("u1", 900, STILL)
    balance = await bus.settle_tokens("u1", reserved=900, used=1150, bucket=STILL)
    assert balance.tokens == pytest.approx(-150, abs=0.1)
    assert (await bus.peek_tokens("u1", STILL)).tokens == pytest.approx(-150, abs=0.1)
    refused = await bus.reserve_tokens("u1", 10, STILL)
    assert not refused.granted
    assert refused.retry_after == pytest.approx(160 * 60, rel=0.01)


async def test_the_balance_refills_continuously_up_to_the_capacity(bus: Bus) -> None:
    fast = TokenBucket(capacity=100, per_minute=6000)  # 100 tokens a second
    assert (await bus.reserve_tokens("u1", 100, fast)).granted

    async def partly_refilled() -> bool:  # seen on its way: not all at once
        return 10 <= (await bus.peek_tokens("u1", fast)).tokens < 90

    await eventually(partly_refilled, "the balance to refill part of the way")
    refused = await bus.reserve_tokens("u1", 100, fast)
    assert not refused.granted
    assert 0 < refused.balance.tokens < 100  # refilled by then, but not enough
    # retry_after is the time the shortfall takes to refill at 100 tokens a second
    shortfall = 100 - refused.balance.tokens
    assert refused.retry_after == pytest.approx(shortfall / 100, abs=0.005)

    async def granted() -> bool:  # a refused reserve takes nothing: it can be asked again
        return (await bus.reserve_tokens("u1", 100, fast)).granted

    await eventually(granted, "the balance to refill enough for the reserve")

    async def filled(user: str) -> float:
        tokens = (await bus.peek_tokens(user, fast)).tokens
        return tokens if tokens >= 100 else 0

    assert await eventually(lambda: filled("u1"), "u1's bucket to fill up") == 100
    # never above the capacity: still 100 once another bucket, emptied only now, is full
    # again (a second of refill later), when an uncapped balance would be near 200
    assert (await bus.reserve_tokens("u2", 100, fast)).granted
    await eventually(lambda: filled("u2"), "u2's bucket to fill up")
    assert (await bus.peek_tokens("u1", fast)).tokens == 100


async def test_concurrent_reserves_never_overdraw(bus_kind: str, bus_limits: BusLimits) -> None:
    """200 reserves of 10 from 1000 tokens, from two bus clients at once: exactly 100 win."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    first = await make_bus(bus_kind, bus_limits, namespace)
    # on Redis a second client of the same keys, as another process would be
    second = first if bus_kind == "memory" else await make_bus(bus_kind, bus_limits, namespace)
    try:
        attempts = [
            (first if i % 2 else second).reserve_tokens("u1", 10, STILL) for i in range(200)
        ]
        results = await asyncio.gather(*attempts)
        assert sum(r.granted for r in results) == 100
        left = (await first.peek_tokens("u1", STILL)).tokens
        assert 0 <= left < 1
    finally:
        await first.close()
        if second is not first:
            await second.close()


async def test_redis_keeps_a_bucket_under_the_user_hash_tag_only_while_not_full(
    bus_limits: BusLimits,
) -> None:
    """Redis only: the key layout (the memory bus has no keys)."""
    import redis.asyncio as aioredis

    namespace = f"test-{uuid.uuid4().hex[:12]}"
    bus = await make_bus("redis", bus_limits, namespace)
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    key = f"{namespace}:user:{{u1}}:budget"
    try:
        await bus.peek_tokens("u1", STILL)
        assert not await client.exists(key)  # a missing bucket is a full one
        await bus.reserve_tokens("u1", 10, STILL)
        assert await client.exists(key)
        # it expires once it would be full again: 10 tokens at 1 a minute, plus a second
        assert 599_000 < await client.pttl(key) <= 601_000
        await bus.settle_tokens("u1", reserved=10, used=0, bucket=STILL)
        assert not await client.exists(key)
    finally:
        await client.aclose()
        await bus.close()
