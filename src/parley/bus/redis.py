"""The Redis bus: the same contract as ``MemoryBus``, shared by many processes.

Key layout (``ns`` is the namespace, ``parley`` by default). Every key carries a Redis
Cluster hash tag (the part in braces), so the keys one script touches share a slot:

``ns:{queue}:z``
    The run queue, a sorted set of run ids. The score packs the priority and the enqueue
    order: ``(PRIORITY_MAX - priority) * 2**SEQ_BITS + seq``, so the lowest score is the
    highest priority, then the oldest. Scores stay below 2**53, so doubles hold them exactly.
``ns:{queue}:seq``
    The counter (INCR) behind ``seq``; it restarts when an enqueue finds the queue empty.
``ns:run:{<run_id>}:events``
    The run's event stream (a Redis Stream; entry fields ``k`` = kind, ``d`` = JSON data),
    trimmed to about ``stream_maxlen`` entries, expiring ``stream_ttl_seconds`` after the
    last append. Entry ids are the Redis ids (``<ms>-<seq>``), used as SSE event ids.
``ns:run:{<run_id>}:cancel``
    The cancel flag (a string with a TTL of ``cancel_ttl_seconds``).
``ns:run:{<run_id>}:cancelq``
    A one-item list pushed with the flag so ``wait_cancel`` can BLPOP on it; a waiter that
    pops it pushes it back, so other waiters wake too. It never outlives the flag.
``ns:user:{<user_id>}:streams``
    The user's open SSE streams: a sorted set of stream id -> expiry (server ms).

Priorities must be in ``PRIORITY_MIN..PRIORITY_MAX`` (0..1000); others raise ValueError.
Needs Redis >= 6.0 (fractional timeouts of blocking pops, scripts replicated by effect).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, cast

import redis.asyncio as aioredis

from parley.bus.interface import (
    BusLimits,
    EventKind,
    QueuedRun,
    QueueFull,
    RunEvent,
    StreamEntry,
)

PRIORITY_MIN = 0
PRIORITY_MAX = 1000
SEQ_BITS = 43  # (PRIORITY_MAX + 1) * 2**43 < 2**53: every score is an exact double

# KEYS: queue zset, seq counter. ARGV: run_id, priority, queue_max, SEQ_BITS, PRIORITY_MAX.
# Returns 1 when queued, 0 when already queued, -1 when the queue is full.
_ENQUEUE = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local size = redis.call('ZCARD', KEYS[1])
if size >= tonumber(ARGV[3]) then
  return -1
end
if size == 0 then
  redis.call('DEL', KEYS[2])
end
local seq = redis.call('INCR', KEYS[2])
local limit = 2 ^ tonumber(ARGV[4])
if seq >= limit then
  return redis.error_reply('parley: queue sequence exhausted')
end
local score = (tonumber(ARGV[5]) - tonumber(ARGV[2])) * limit + seq
redis.call('ZADD', KEYS[1], string.format('%.0f', score), ARGV[1])
return 1
"""

# KEYS: stream. ARGV: maxlen, kind, data, ttl ms. Returns the entry id.
_APPEND = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'k', ARGV[2], 'd', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return id
"""

# KEYS: cancel flag, wake-up list. ARGV: ttl ms.
_REQUEST_CANCEL = """
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""

# KEYS: cancel flag, wake-up list. Puts back the wake-up item a waiter popped, expiring
# with the flag. Returns 1 if the flag is set.
_REWAKE = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return 0
end
if ttl > 0 then
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"""

# KEYS: the user's slots. ARGV: stream id, limit, ttl ms. Returns 1 if the slot is held.
_OPEN_STREAM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(last[2]) - now))
return 1
"""


_Arg = str | int | float


class _Script(Protocol):
    """What ``register_script`` returns, typed (redis-py leaves ``__call__`` untyped)."""

    def __call__(self, keys: Sequence[str], args: Sequence[_Arg]) -> Awaitable[Any]: ...


class RedisBus:
    def __init__(
        self, url: str, limits: BusLimits | None = None, *, namespace: str = "parley"
    ) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError("the bus namespace must be non-empty and free of braces")
        self.limits = limits or BusLimits()
        self._ns = namespace
        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._queue_key = f"{namespace}:{{queue}}:z"
        self._seq_key = f"{namespace}:{{queue}}:seq"
        self._enqueue = self._script(_ENQUEUE)
        self._append = self._script(_APPEND)
        self._request_cancel = self._script(_REQUEST_CANCEL)
        self._rewake = self._script(_REWAKE)
        self._open_stream = self._script(_OPEN_STREAM)

    def _script(self, source: str) -> _Script:
        return cast(_Script, self._redis.register_script(source))

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()

    # -- keys ------------------------------------------------------------------------------

    def _run_key(self, run_id: str, suffix: str) -> str:
        return f"{self._ns}:run:{{{run_id}}}:{suffix}"

    def _slots_key(self, user_id: str) -> str:
        return f"{self._ns}:user:{{{user_id}}}:streams"

    # -- queue -----------------------------------------------------------------------------

    async def enqueue(self, item: QueuedRun) -> None:
        if not PRIORITY_MIN <= item.priority <= PRIORITY_MAX:
            raise ValueError(f"priority {item.priority} is outside {PRIORITY_MIN}..{PRIORITY_MAX}")
        args: list[_Arg] = [
            item.run_id,
            item.priority,
            self.limits.queue_max,
            SEQ_BITS,
            PRIORITY_MAX,
        ]
        outcome = await self._enqueue(keys=[self._queue_key, self._seq_key], args=args)
        if int(outcome) < 0:
            raise QueueFull("the run queue is full", retry_after=1.0)

    async def dequeue(self, timeout: float) -> QueuedRun | None:
        if timeout > 0:
            popped = await self._redis.bzpopmin([self._queue_key], _block_seconds(timeout))
            return None if not popped else _queued(popped[1], popped[2])
        popped_runs = _scored(await self._redis.zpopmin(self._queue_key))
        return popped_runs[0] if popped_runs else None

    async def remove(self, run_id: str) -> bool:
        return bool(await self._redis.zrem(self._queue_key, run_id))

    async def queue_depth(self) -> dict[int, int]:
        depth: dict[int, int] = {}
        for run in _scored(await self._redis.zrange(self._queue_key, 0, -1, withscores=True)):
            depth[run.priority] = depth.get(run.priority, 0) + 1
        return depth

    # -- streams ---------------------------------------------------------------------------

    async def append(self, run_id: str, event: RunEvent) -> str:
        data = json.dumps(event.data, separators=(",", ":"))
        ttl_ms = _ms(self.limits.stream_ttl_seconds)
        args: list[_Arg] = [self.limits.stream_maxlen, event.kind.value, data, ttl_ms]
        return _text(await self._append(keys=[self._run_key(run_id, "events")], args=args))

    async def read(
        self, run_id: str, after: str | None, *, timeout: float, count: int = 512
    ) -> list[StreamEntry]:
        # an explicit id (never "$") also wakes on the first entry of a stream not made yet
        key = self._run_key(run_id, "events")
        block = _ms(timeout) if timeout > 0 else None  # BLOCK 0 would wait forever
        reply = await self._redis.xread({key: after or "0-0"}, count=count, block=block)
        return [_entry(entry_id, fields) for entry_id, fields in _stream_rows(reply)]

    async def stream_exists(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._run_key(run_id, "events")))

    # -- cancel ----------------------------------------------------------------------------

    def _cancel_keys(self, run_id: str) -> list[str]:
        return [self._run_key(run_id, "cancel"), self._run_key(run_id, "cancelq")]

    async def request_cancel(self, run_id: str) -> None:
        ttl_ms = _ms(self.limits.cancel_ttl_seconds)
        await self._request_cancel(keys=self._cancel_keys(run_id), args=[ttl_ms])

    async def cancel_requested(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._run_key(run_id, "cancel")))

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        if await self.cancel_requested(run_id):
            return True
        if timeout <= 0:  # BLPOP 0 would wait forever
            return False
        flag, wake = self._cancel_keys(run_id)
        popped = await self._redis.blpop([wake], _block_seconds(timeout))
        if not popped:
            return await self.cancel_requested(run_id)
        return bool(await self._rewake(keys=[flag, wake], args=[]))

    # -- per-user stream slots -------------------------------------------------------------

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        args: list[_Arg] = [stream_id, limit, _ms(ttl)]
        return bool(await self._open_stream(keys=[self._slots_key(user_id)], args=args))

    async def close_stream(self, user_id: str, stream_id: str) -> None:
        await self._redis.zrem(self._slots_key(user_id), stream_id)


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up and at least 1 (0 means 'forever' to Redis)."""
    return max(1, math.ceil(seconds * 1000))


def _block_seconds(seconds: float) -> float:
    """A blocking-pop timeout in seconds, never 0 (which would block forever)."""
    return _ms(seconds) / 1000


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _integer(value: object) -> int:
    """A zset score as an int; scores come back as floats or numeric strings."""
    if isinstance(value, int | float):
        return int(value)
    return int(float(_text(value)))


def _queued(member: object, score: object) -> QueuedRun:
    priority = PRIORITY_MAX - (_integer(score) >> SEQ_BITS)
    return QueuedRun(_text(member), priority)


def _scored(pairs: object) -> list[QueuedRun]:
    """Queued runs from a ``[(member, score), ...]`` reply (ZPOPMIN, ZRANGE WITHSCORES)."""
    return [_queued(*pair) for pair in cast(list[Sequence[object]], pairs or [])]


def _stream_rows(reply: object) -> list[Any]:
    """The entries of the one stream an XREAD named: ``[[key, entries]]`` or ``{key: entries}``."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(next(iter(reply.values())))
    return list(cast(list[Any], reply)[0][1])


def _entry(entry_id: object, fields: object) -> StreamEntry:
    values = cast(dict[str, str], fields)
    data: dict[str, Any] = json.loads(values["d"])
    return StreamEntry(_text(entry_id), RunEvent(EventKind(values["k"]), data))
