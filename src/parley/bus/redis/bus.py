"""``RedisBus``: the bus's sections over one Redis client, one per process."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from parley.bus.interface import BusLimits
from parley.bus.redis.appends import AppendBatcher
from parley.bus.redis.budget import _BudgetOps
from parley.bus.redis.cancel import _CancelOps
from parley.bus.redis.cancel_watch import CancelWatch
from parley.bus.redis.health import HEALTH_CHECK_SECONDS, checked_pool
from parley.bus.redis.held import _HeldOps
from parley.bus.redis.inputs import _InputOps
from parley.bus.redis.load import _LoadOps
from parley.bus.redis.packing import packed_in_c
from parley.bus.redis.queue import _QueueOps
from parley.bus.redis.shared import MAX_BLOCK_SECONDS
from parley.bus.redis.slots import _SlotOps
from parley.bus.redis.streams import _APPEND, _READ_CONCURRENCY, _StreamOps, append_shared
from parley.bus.redis.tail import _StreamTail
from parley.bus.redis.throttle import _ThrottleOps
from parley.bus.redis.writes import _WriteOps

POOL_MAX_CONNECTIONS = 1000  # blocking reads and stop watches hold none of these; dequeue does
POOL_WAIT_SECONDS = 20.0


class RedisBus(
    _QueueOps,
    _StreamOps,
    _CancelOps,
    _SlotOps,
    _LoadOps,
    _BudgetOps,
    _ThrottleOps,
    _WriteOps,
    _InputOps,
    _HeldOps,
):
    """The Redis bus: the same contract as ``MemoryBus``, shared by many processes. Each
    section (the base classes) lives in its own module, with its keys and scripts."""

    def __init__(
        self, url: str, limits: BusLimits | None = None, *, namespace: str = "parley"
    ) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError("the bus namespace must be non-empty and free of braces")
        self.limits = limits or BusLimits()
        self._ns = namespace
        # a command finding every connection busy waits for one (POOL_WAIT_SECONDS at most)
        # instead of failing at once: a burst is slowed, not refused
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            decode_responses=True,
            max_connections=POOL_MAX_CONNECTIONS,
            timeout=POOL_WAIT_SECONDS,
            # blocking calls (BZPOPMIN in dequeue) may wait longer
            # than redis-py's default 5 s socket timeout; they are capped below this
            socket_timeout=MAX_BLOCK_SECONDS + 10,
            # an idle connection is PINGed first: one left by a restarted Redis is replaced
            health_check_interval=HEALTH_CHECK_SECONDS,
        )
        packed_in_c(checked_pool(pool))
        self._redis = aioredis.Redis(connection_pool=pool)
        self._tail = _StreamTail(url, self._redis)
        self._cancel_watch = CancelWatch(url, self._cancel_channel(), self.cancels_requested)
        self._reads = asyncio.Semaphore(_READ_CONCURRENCY)
        self._appends = AppendBatcher(
            self._redis,
            _APPEND,
            shared=append_shared(self.limits),
            batching=self.limits.append_batching,
        )

    @property
    def namespace(self) -> str:
        """The prefix of every key this bus uses."""
        return self._ns

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        try:
            await self._appends.close()
            await self._tail.close()
            await self._cancel_watch.close()
        finally:
            await self._redis.aclose()
            await self._redis.connection_pool.disconnect()  # (given to the client: ours)
