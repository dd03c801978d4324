"""The Redis bus's pooled connections after a failure (``bus/redis/health.py``): every
connection not heard from since is PINGed before its next command, and a connection made
after the failure sets itself up without one (a PING sent amid its set-up read one of the
set-up's replies as its own: a send failed with a 500, seen once in CI)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from parley.bus.redis.health import HEALTH_CHECK_SECONDS, checked_pool
from tests.builders import BUS_BACKENDS, REDIS_URL

pytestmark = pytest.mark.skipif("redis" not in BUS_BACKENDS, reason="needs the Redis bus")


def _failed_now(pool: aioredis.ConnectionPool) -> None:
    setattr(pool.connection_class, "failed_at", asyncio.get_running_loop().time())  # noqa: B010


async def test_a_connection_made_after_a_failure_sets_itself_up_and_answers() -> None:
    pool = checked_pool(
        aioredis.ConnectionPool.from_url(REDIS_URL, health_check_interval=HEALTH_CHECK_SECONDS)
    )
    client = aioredis.Redis(connection_pool=pool)
    cls = pool.connection_class
    sent = cls.send_packed_command

    async def failing_meanwhile(self: Any, command: Any, check_health: bool = True) -> None:
        await sent(self, command, check_health)
        if b"SETINFO" in b"".join(command):  # another connection fails amid this one's set-up
            _failed_now(pool)

    try:
        assert await client.ping()
        _failed_now(pool)  # one of the pool's connections just failed
        await pool.disconnect()  # so that the next command is on a new connection
        cls.send_packed_command = failing_meanwhile  # type: ignore[method-assign]
        assert await client.set("parley-health-test", "1", ex=5)
        assert await client.get("parley-health-test") == b"1"
    finally:
        await client.aclose()


async def test_after_a_failure_a_connection_used_before_it_is_pinged_first() -> None:
    pool = checked_pool(
        aioredis.ConnectionPool.from_url(REDIS_URL, health_check_interval=HEALTH_CHECK_SECONDS)
    )
    client = aioredis.Redis(connection_pool=pool)
    try:
        assert await client.ping()
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        await pool.release(connection)
        pings: list[str] = []
        sent = connection.send_packed_command

        async def counted(command: object, check_health: bool = True) -> None:
            pings.append(str(command))
            await sent(command, check_health)

        connection.send_packed_command = counted
        _failed_now(pool)
        assert await client.get("parley-health-test-missing") is None
        assert any("PING" in p for p in pings), pings
    finally:
        await client.aclose()
