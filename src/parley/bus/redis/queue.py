"""The Redis bus's run queue: bounded, highest priority first, then oldest.

``ns:{queue}:z``
    The run queue, a sorted set of run ids. The score packs the priority and the enqueue
    order: ``(PRIORITY_MAX - priority) * 2**SEQ_BITS + seq``, so the lowest score is the
    highest priority, then the oldest. Scores stay below 2**53, so doubles hold them exactly.
    The runs of priority ``p`` are the score band
    ``[(PRIORITY_MAX - p) * 2**SEQ_BITS, (PRIORITY_MAX - p + 1) * 2**SEQ_BITS)``.
``ns:{queue}:seq``
    The counter (INCR) behind ``seq``; it restarts when an enqueue finds the queue empty.

Priorities must be in ``PRIORITY_MIN..PRIORITY_MAX`` (-1..1000: the tiers' 0..1000 and the
background runs' -1); others raise ValueError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import cast

from parley.bus.interface import QueuedRun, QueueFull
from parley.bus.redis.shared import _Arg, _block_seconds, _LuaScript, _RedisOps, _text
from parley.domain import BACKGROUND_PRIORITY

PRIORITY_MIN = BACKGROUND_PRIORITY  # -1: a summary's, below every tier's
PRIORITY_MAX = 1000
SEQ_BITS = 43  # (PRIORITY_MAX - PRIORITY_MIN + 1) * 2**43 < 2**53: every score is exact

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

# KEYS: queue zset. ARGV: SEQ_BITS, PRIORITY_MAX. Returns {priority, count, ...}, highest
# priority first. Walks the non-empty priority bands only: the lowest score from where the
# last band ended gives the next band, ZCOUNT counts it (O(P log N) for P priorities).
# ZRANGEBYSCORE rather than ZRANGE BYSCORE (Redis 6.2) keeps Redis 6.0 enough.
_DEPTH_BY_PRIORITY = """
local band = 2 ^ tonumber(ARGV[1])
local depth = {}
local from = '-inf'
while true do
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 then
    return depth
  end
  local level = math.floor(tonumber(first[2]) / band)
  local upto = string.format('%.0f', (level + 1) * band)
  local count = redis.call('ZCOUNT', KEYS[1], string.format('%.0f', level * band), '(' .. upto)
  depth[#depth + 1] = tonumber(ARGV[2]) - level
  depth[#depth + 1] = count
  from = upto
end
"""


# KEYS: queue zset. ARGV: the score that starts the bands too low. Pops and returns {run id,
# score} of the first run below it, or nothing.
_POP_BELOW = """
local first = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'WITHSCORES', 'LIMIT', 0, 1)
if #first == 0 then
  return false
end
redis.call('ZREM', KEYS[1], first[1])
return first
"""
PRIORITY_POLL_SECONDS = 0.02


class _QueueOps(_RedisOps):
    _enqueue = _LuaScript(_ENQUEUE)
    _pop_below = _LuaScript(_POP_BELOW)
    _depth_by_priority = _LuaScript(_DEPTH_BY_PRIORITY)

    @property
    def _queue_key(self) -> str:
        return self._key("", "queue", "z")

    @property
    def _seq_key(self) -> str:
        return self._key("", "queue", "seq")

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

    async def dequeue(
        self, timeout: float, *, min_priority: int = BACKGROUND_PRIORITY
    ) -> QueuedRun | None:
        if min_priority > PRIORITY_MIN:
            return await self._dequeue_at_least(min_priority, timeout)
        if timeout > 0:
            popped = await self._redis.bzpopmin([self._queue_key], _block_seconds(timeout))
            return None if not popped else _queued(popped[1], popped[2])
        popped_runs = _scored(await self._redis.zpopmin(self._queue_key))
        return popped_runs[0] if popped_runs else None

    async def _dequeue_at_least(self, min_priority: int, timeout: float) -> QueuedRun | None:
        """A run of at least ``min_priority``: polled (a blocking pop cannot skip the lower
        bands), every ``PRIORITY_POLL_SECONDS`` until ``timeout``."""
        below = (PRIORITY_MAX - min(min_priority, PRIORITY_MAX) + 1) * 2**SEQ_BITS
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            reply = await self._pop_below(keys=[self._queue_key], args=[below])
            if reply:
                pair = cast(Sequence[object], reply)
                return _queued(pair[0], pair[1])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(PRIORITY_POLL_SECONDS, left))

    async def remove(self, run_id: str) -> bool:
        return bool(await self._redis.zrem(self._queue_key, run_id))

    async def queue_length(self) -> int:
        return int(await self._redis.zcard(self._queue_key))

    async def queue_depth(self) -> dict[int, int]:
        args: list[_Arg] = [SEQ_BITS, PRIORITY_MAX]
        reply = await self._depth_by_priority(keys=[self._queue_key], args=args)
        flat = cast(Sequence[object], reply)
        return {
            int(_text(priority)): int(_text(count))
            for priority, count in zip(flat[::2], flat[1::2], strict=True)
        }


def _integer(value: object) -> int:
    """A zset score as an int; scores come back as floats or numeric strings."""
    if isinstance(value, int | float):
        return int(value)
    return int(float(_text(value)))


def _queued(member: object, score: object) -> QueuedRun:
    priority = PRIORITY_MAX - (_integer(score) >> SEQ_BITS)
    return QueuedRun(_text(member), priority)


def _scored(pairs: object) -> list[QueuedRun]:
    """Queued runs from a ``[(member, score), ...]`` reply (ZPOPMIN)."""
    return [_queued(*pair) for pair in cast(list[Sequence[object]], pairs or [])]
