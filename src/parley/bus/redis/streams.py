"""The Redis bus's per-run event streams.

``ns:run:{<run_id>}:events``
    The run's event stream (a Redis Stream; entry fields ``k`` = kind, ``d`` = JSON data),
    trimmed to about ``stream_maxlen`` entries, expiring ``stream_ttl_seconds`` after the
    last append. Entry ids are the Redis ids (``<ms>-<seq>``), used as SSE event ids.
``ns:run:{<run_id>}:fence``
    The stream's fence: the lowest attempt of the run whose fenced appends it still takes
    (a string; missing = 0), expiring with the stream. Checked and raised in the append
    script itself, so a stale worker's append can never slip in between.

Blocking reads share the process's stream tail (``tail.py``) instead of one blocking
``XREAD`` each. ``read(timeout > 0)`` answers from a watch that covers ``after`` (``after >=
base``), otherwise with a non-blocking ``XREAD`` (at most ``_READ_CONCURRENCY`` at a time),
and when there is nothing yet, waits on the watch (made at ``after`` if missing). At the
deadline it asks Redis once more unless the tail was surely following the key.
``read(timeout <= 0)`` is a plain non-blocking ``XREAD``, so it always sees the caller's own
appends.
"""

from __future__ import annotations

import asyncio
import time

from parley.bus.interface import BusLimits, RunEvent, StaleAttempt, StreamEntry
from parley.bus.redis.appends import AppendBatcher
from parley.bus.redis.shared import (
    _Arg,
    _entry,
    _Id,
    _LuaScript,
    _ms,
    _parse_id,
    _RedisOps,
    _stream_rows,
    _text,
)
from parley.bus.redis.tail import _StreamTail, _Watch

_READ_CONCURRENCY = 4  # non-blocking XREADs of blocking reads in flight at once

# KEYS: stream, fence. ARGV: kind, data, fence ('' for none), then the args every append
# shares (sent once per batch: ``append_shared``): maxlen, ttl ms. Returns the entry id, or
# false (appending nothing) when the fence given is below the stream's.
_APPEND = """
local maxlen, ttl = ARGV[4], ARGV[5]
if ARGV[3] ~= '' then
  local fence = tonumber(ARGV[3])
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if fence < current then
    return false
  end
  redis.call('SET', KEYS[2], string.format('%d', math.max(fence, current)), 'PX', ttl)
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', 'k', ARGV[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
return id
"""

# KEYS: fence. ARGV: fence, ttl ms. Raises the fence (never lowers it).
_RAISE_FENCE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
"""


def append_shared(limits: BusLimits) -> list[_Arg]:
    """The args ``_APPEND`` ends with, the same for every append of a bus."""
    return [limits.stream_maxlen, _ms(limits.stream_ttl_seconds)]


class _StreamOps(_RedisOps):
    _tail: _StreamTail
    _reads: asyncio.Semaphore  # _READ_CONCURRENCY permits
    _appends: AppendBatcher  # of _APPEND
    _raise_fence = _LuaScript(_RAISE_FENCE)

    async def append(self, run_id: str, event: RunEvent, *, fence: int | None = None) -> str:
        fenced = "" if fence is None else str(int(fence))
        args: list[_Arg] = [event.kind.value, event.json, fenced]
        keys = [self._run_key(run_id, "events"), self._run_key(run_id, "fence")]
        entry_id = await self._appends.append(keys, args)
        if entry_id is None:
            raise StaleAttempt(f"run {run_id}: attempt {fence} is fenced out")
        return _text(entry_id)

    async def raise_fence(self, run_id: str, fence: int) -> None:
        ttl_ms = _ms(self.limits.stream_ttl_seconds)
        args: list[_Arg] = [int(fence), ttl_ms]
        await self._raise_fence(keys=[self._run_key(run_id, "fence")], args=args)

    async def read(
        self, run_id: str, after: str | None, *, timeout: float, count: int = 512
    ) -> list[StreamEntry]:
        key = self._run_key(run_id, "events")
        # an explicit id (never "$") also wakes on the first entry of a stream not made yet
        after_text = after or "0-0"
        after_id = _parse_id(after_text)
        if timeout <= 0 or after_id is None or count < 1:
            # not waiting, or an id the tail cannot order: one XREAD, as Redis answers it
            return await self._xread(key, after_text, timeout, count)
        return await self._read_tailed(key, after_text, after_id, timeout, count)

    async def stream_exists(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._run_key(run_id, "events")))

    async def _xread(self, key: str, after: str, timeout: float, count: int) -> list[StreamEntry]:
        block = _ms(timeout) if timeout > 0 else None  # BLOCK 0 would wait forever
        reply = await self._redis.xread({key: after}, count=count, block=block)
        return [_entry(entry_id, fields) for entry_id, fields in _stream_rows(reply)]

    async def _read_now(self, key: str, after: str, count: int) -> list[StreamEntry]:
        """A non-blocking XREAD for a blocking read, with few in flight (pooled connections)."""
        async with self._reads:
            return await self._xread(key, after, 0, count)

    async def _read_tailed(
        self, key: str, after: str, after_id: _Id, timeout: float, count: int
    ) -> list[StreamEntry]:
        """A blocking read served by the tail: the cache, else Redis once, then wait."""
        deadline = time.monotonic() + timeout
        watch = self._tail.watches.get(key)
        if watch is not None and watch.broken:
            return await self._xread(key, after, timeout, count)
        found = await self._read_first(key, after, after_id, count, watch)
        if found:
            return found
        waited = await self._wait_tailed(key, after, after_id, count, deadline)
        if waited is not None:
            return waited
        # the deadline: the cache if the tail surely followed the key, else Redis once more
        watch = self._tail.watches.get(key)
        if watch is not None and not watch.broken and self._tail.following(watch):
            cached = watch.since(after_id, count)
            if cached is not None:
                return cached
        return await self._read_now(key, after, count)

    async def _read_first(
        self, key: str, after: str, after_id: _Id, count: int, watch: _Watch | None
    ) -> list[StreamEntry]:
        """What is there already: the watch's cache, else Redis (skipped when the watch
        covers ``after`` and the tail follows the key: then nothing is missing)."""
        if watch is not None:
            watch.last_interest = time.monotonic()
            found = watch.since(after_id, count)
            if found:
                return found
            if found is not None and self._tail.following(watch):
                return []
        return await self._read_now(key, after, count)

    async def _wait_tailed(
        self, key: str, after: str, after_id: _Id, count: int, deadline: float
    ) -> list[StreamEntry] | None:
        """Wait on the key's watch until entries come; None at the deadline."""
        tail = self._tail
        while True:
            watch = tail.watch(key, after_id)
            if watch.broken:
                remaining = deadline - time.monotonic()
                return await self._xread(key, after, remaining, count)
            changed = watch.changed  # taken before any await: no wake-up is missed
            found = watch.since(after_id, count)
            if found:
                return found
            if found is None:  # ``after`` is older than the cache: only Redis has the rest
                found = await self._read_now(key, after, count)
                if found:
                    return found
            tail.follow(watch)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await watch.wait(changed, remaining, tail.deadlines):
                return None
