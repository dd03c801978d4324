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
``ns:user:{<user_id>}:budget``
    The user's token bucket: a hash of ``t`` (the balance, fractional, negative after an
    overrun) and ``at`` (server ms it was taken at). Refill is computed from Redis ``TIME``
    inside the one script that reads or changes it, so every process agrees on the clock. A
    missing key is a full bucket: a change that fills it deletes the key, and the key
    expires when it would have refilled anyway.

Priorities must be in ``PRIORITY_MIN..PRIORITY_MAX`` (0..1000); others raise ValueError.
Needs Redis >= 6.0 (fractional timeouts of blocking pops, scripts replicated by effect,
``CLIENT UNBLOCK``).

Blocking stream reads share one "tail" per bus (``_StreamTail``) instead of one blocking
``XREAD`` per reader, so waiting SSE relays hold no pooled connection and a token costs one
round trip for the whole process, not one per reader:

* The tail keeps a *watch* per stream key this process has waiting readers for: the id it
  reads after (``last``), the recent entries (a deque of at most ``_CACHE_SIZE``), ``base``
  (every entry after it, up to ``last``, is in the deque), and an event that wakes readers.
* One task, on a dedicated connection, loops on ``XREAD BLOCK 2000 COUNT 512 STREAMS k1 k2
  ... id1 id2 ...`` over all watched keys, appends what comes to the watches and wakes their
  readers. Watches nobody read for ``_IDLE_SECONDS`` (``_DONE_IDLE_SECONDS`` once a ``done``
  event was seen) are dropped; with none left, the task sleeps until one is added. It
  reconnects after errors (with backoff) and resumes from each watch's ``last``.
* ``read(timeout > 0)`` answers from a watch that covers ``after`` (``after >= base``),
  otherwise with a non-blocking ``XREAD`` (at most ``_READ_CONCURRENCY`` at a time), and when
  there is nothing yet, waits on the watch (made at ``after`` if missing). At the deadline it
  asks Redis once more unless the tail was surely following the key. ``read(timeout <= 0)``
  is a plain non-blocking ``XREAD``, so it always sees the caller's own appends.
* A watch added while the tail is blocked must get into its ``XREAD`` at once: every added
  (or re-based) watch bumps a generation, the tail records the generation each ``XREAD`` was
  built from, and one helper task sends ``CLIENT UNBLOCK <tail id>`` on the main pool
  (retrying every ~1 ms, a bounded number of times, since the unblock can reach Redis before
  the ``XREAD`` does) until the tail has rebuilt from that generation.

A multi-key ``XREAD`` needs all its keys on one node. That holds for one Redis (or a
replicated primary); on Redis Cluster the run streams spread over slots, so this would need
one tail per node (grouping keys by slot owner), which is not done here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Any, Literal, Protocol, cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from parley.bus.interface import (
    BusLimits,
    EventKind,
    QueuedRun,
    QueueFull,
    RunEvent,
    StreamEntry,
    TokenBalance,
    TokenBucket,
    TokenReservation,
)

PRIORITY_MIN = 0
PRIORITY_MAX = 1000
SEQ_BITS = 43  # (PRIORITY_MAX + 1) * 2**43 < 2**53: every score is an exact double

MAX_BLOCK_SECONDS = 30.0
POOL_MAX_CONNECTIONS = 1000  # blocking reads no longer hold these; dequeue/wait_cancel still do

# the stream tail (see the module docstring)
_CACHE_SIZE = 1024  # entries kept per watched stream
_TAIL_BLOCK_MS = 2000
_TAIL_COUNT = 512
_IDLE_SECONDS = 30.0  # a watch nobody read for this long is dropped
_DONE_IDLE_SECONDS = 5.0  # ... or this long once its ``done`` event was seen
_PRUNE_EVERY_SECONDS = 1.0
_RETRY_MIN_SECONDS = 0.1
_RETRY_MAX_SECONDS = 2.0
_UNBLOCK_ATTEMPTS = 100  # CLIENT UNBLOCKs per nudge at most
_NUDGE_SPINS = 3000  # ~1 ms sleeps per nudge at most (the tail rebuilds every 2 s anyway)
_READ_CONCURRENCY = 4  # non-blocking XREADs of blocking reads in flight at once

log = logging.getLogger(__name__)

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

# KEYS: the user's bucket. ARGV: capacity, tokens per minute, op ('reserve' | 'settle' |
# 'peek'), n (reserve: the amount; settle: reserved - used). Returns {1 if taken (or
# written), the balance as a decimal string} (a Lua number would be truncated to an integer).
_BUDGET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2]) / 60000
local tokens = cap
local stored = redis.call('HMGET', KEYS[1], 't', 'at')
if stored[1] then
  tokens = math.min(cap, tonumber(stored[1]) + math.max(0, now - tonumber(stored[2])) * rate)
end
local op, n = ARGV[3], tonumber(ARGV[4])
if op == 'peek' then
  return {1, string.format('%.6f', tokens)}
elseif op == 'reserve' then
  if tokens < n then
    return {0, string.format('%.6f', tokens)}
  end
  tokens = tokens - n
elseif op == 'settle' then
  tokens = math.min(cap, tokens + n)
else
  return redis.error_reply('parley: unknown budget op')
end
if tokens >= cap then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'at', string.format('%.3f', now))
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((cap - tokens) / rate) + 1000))
end
return {1, string.format('%.6f', tokens)}
"""

_BudgetOp = Literal["reserve", "settle", "peek"]

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
        self._redis = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            max_connections=POOL_MAX_CONNECTIONS,
            # blocking calls (BLPOP in wait_cancel, BZPOPMIN in dequeue) may wait longer
            # than redis-py's default 5 s socket timeout; they are capped below this
            socket_timeout=MAX_BLOCK_SECONDS + 10,
        )
        self._tail = _StreamTail(url, self._redis)
        self._reads = asyncio.Semaphore(_READ_CONCURRENCY)
        self._queue_key = f"{namespace}:{{queue}}:z"
        self._seq_key = f"{namespace}:{{queue}}:seq"
        self._enqueue = self._script(_ENQUEUE)
        self._append = self._script(_APPEND)
        self._request_cancel = self._script(_REQUEST_CANCEL)
        self._rewake = self._script(_REWAKE)
        self._open_stream = self._script(_OPEN_STREAM)
        self._budget = self._script(_BUDGET)

    def _script(self, source: str) -> _Script:
        return cast(_Script, self._redis.register_script(source))

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        try:
            await self._tail.close()
        finally:
            await self._redis.aclose()

    # -- keys ------------------------------------------------------------------------------

    def _run_key(self, run_id: str, suffix: str) -> str:
        return f"{self._ns}:run:{{{run_id}}}:{suffix}"

    def _slots_key(self, user_id: str) -> str:
        return f"{self._ns}:user:{{{user_id}}}:streams"

    def _budget_key(self, user_id: str) -> str:
        return f"{self._ns}:user:{{{user_id}}}:budget"

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
        key = self._run_key(run_id, "events")
        # an explicit id (never "$") also wakes on the first entry of a stream not made yet
        after_text = after or "0-0"
        after_id = _parse_id(after_text)
        if timeout <= 0 or after_id is None or count < 1:
            # not waiting, or an id the tail cannot order: one XREAD, as Redis answers it
            return await self._xread(key, after_text, timeout, count)
        return await self._read_tailed(key, after_text, after_id, timeout, count)

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
        tail = self._tail
        deadline = time.monotonic() + timeout
        watch = tail.watches.get(key)
        up_to_date = False
        if watch is not None:
            if watch.broken:
                return await self._xread(key, after, timeout, count)
            watch.last_interest = time.monotonic()
            found = watch.since(after_id, count)
            if found:
                return found
            # the watch covers ``after`` and the tail follows the key: nothing is missing
            up_to_date = found is not None and tail.following(watch)
        if not up_to_date:
            found = await self._read_now(key, after, count)
            if found:
                return found
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
            if remaining <= 0:
                break
            watch.waiters += 1
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                break
            finally:
                watch.waiters -= 1
        # the deadline: the cache if the tail surely followed the key, else Redis once more
        watch = tail.watches.get(key)
        if watch is not None and not watch.broken and tail.following(watch):
            found = watch.since(after_id, count)
            if found is not None:
                return found
        return await self._read_now(key, after, count)

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

    # -- per-user token budgets ------------------------------------------------------------

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        taken, tokens = await self._bucket_op(user_id, bucket, "reserve", amount)
        balance = TokenBalance(tokens, bucket)
        if taken:
            return TokenReservation(True, balance)
        return TokenReservation(False, balance, bucket.seconds_until(tokens, amount))

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        _, tokens = await self._bucket_op(user_id, bucket, "settle", reserved - used)
        return TokenBalance(tokens, bucket)

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        _, tokens = await self._bucket_op(user_id, bucket, "peek", 0)
        return TokenBalance(tokens, bucket)

    async def _bucket_op(
        self, user_id: str, bucket: TokenBucket, op: _BudgetOp, n: int
    ) -> tuple[bool, float]:
        args: list[_Arg] = [bucket.capacity, bucket.per_minute, op, n]
        reply = await self._budget(keys=[self._budget_key(user_id)], args=args)
        taken, tokens = cast(Sequence[object], reply)
        return bool(int(_text(taken))), float(_text(tokens))


_Id = tuple[int, int]  # a stream entry id, ordered as Redis orders them


class _Watch:
    """What the tail keeps of one stream key: its recent entries and who waits for more."""

    __slots__ = (
        "base",
        "broken",
        "changed",
        "done",
        "entries",
        "generation",
        "last",
        "last_interest",
        "last_text",
        "waiters",
    )

    def __init__(self, after: _Id, generation: int, now: float) -> None:
        self.base = after  # every entry after ``base`` (up to ``last``) is in ``entries``
        self.last = after  # the tail reads after this id
        self.last_text = _id_text(after)
        self.entries: deque[tuple[_Id, StreamEntry]] = deque(maxlen=_CACHE_SIZE)
        self.changed = asyncio.Event()
        self.generation = generation  # the tail generation this watch (or base) dates from
        self.last_interest = now
        self.waiters = 0
        self.done = False  # a ``done`` event was seen
        self.broken = False  # an entry did not parse: readers go to Redis themselves

    def since(self, after: _Id, count: int) -> list[StreamEntry] | None:
        """Cached entries after ``after`` (at most ``count``); None if the cache starts later."""
        if after < self.base:
            return None
        found: list[StreamEntry] = []
        for entry_id, entry in reversed(self.entries):  # readers are mostly near the end
            if entry_id <= after:
                break
            found.append(entry)
        found.reverse()
        return found[:count]

    def rebase(self, after: _Id, generation: int) -> None:
        """Read from an earlier id (only while nothing is cached)."""
        self.base = self.last = after
        self.last_text = _id_text(after)
        self.generation = generation

    def add(self, entry_id: _Id, entry: StreamEntry) -> None:
        if len(self.entries) == self.entries.maxlen:
            self.base = self.entries[0][0]  # the oldest entry falls out
        self.entries.append((entry_id, entry))
        self.last = entry_id
        self.last_text = entry.id
        if entry.event.kind is EventKind.DONE:
            self.done = True

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class _StreamTail:
    """One blocking XREAD over every watched stream key, on its own connection."""

    def __init__(self, url: str, redis: aioredis.Redis) -> None:
        self._url = url
        self._redis = redis  # the main pool: CLIENT UNBLOCK goes through it
        self.watches: dict[str, _Watch] = {}
        self._client: aioredis.Redis | None = None
        self._client_id: int | None = None
        self._generation = 0  # bumped when a watch is added or re-based
        self._built = 0  # the generation the current (or last) XREAD was built from
        self._blocked = False  # an XREAD is in flight on the tail connection
        self._wake = asyncio.Event()  # set when a watch is added; the idle tail waits on it
        self._task: asyncio.Task[None] | None = None
        self._nudger: asyncio.Task[None] | None = None
        self._pruned_at = 0.0
        self._closed = False

    def watch(self, key: str, after: _Id) -> _Watch:
        """The key's watch, made at ``after`` if missing; marks a read of it."""
        now = time.monotonic()
        watch = self.watches.get(key)
        if watch is None:
            self._generation += 1
            watch = self.watches[key] = _Watch(after, self._generation, now)
        elif after < watch.base and not watch.entries:
            # made at a later id that no entry has reached (e.g. a made-up Last-Event-ID)
            self._generation += 1
            watch.rebase(after, self._generation)
        watch.last_interest = now
        return watch

    def following(self, watch: _Watch) -> bool:
        """True if the tail is up and its XREAD reads ``watch`` from ``watch.last``."""
        return (
            self._client_id is not None
            and self._built >= watch.generation
            and self._task is not None
            and not self._task.done()
        )

    def follow(self, watch: _Watch) -> None:
        """Make sure the tail reads the watch's key soon: start it, wake it, unblock it."""
        if self._closed:
            return
        if self._task is None or self._task.done():
            # a fresh context: the tail outlives the read that happens to start it
            self._task = asyncio.create_task(
                self._run(), name="parley-redis-stream-tail", context=contextvars.Context()
            )
        self._wake.set()
        if self._built < watch.generation and (self._nudger is None or self._nudger.done()):
            self._nudger = asyncio.create_task(
                self._nudge(), name="parley-redis-tail-nudge", context=contextvars.Context()
            )

    async def close(self) -> None:
        self._closed = True
        tasks = {t for t in (self._task, self._nudger) if t is not None}
        while tasks := {t for t in tasks if not t.done()}:
            # again and again: on Python 3.11, redis-py's asyncio.wait_for around a socket
            # write can swallow a cancellation that lands just as the write completes
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=0.1)
        await self._disconnect()

    async def _nudge(self) -> None:
        """CLIENT UNBLOCK the tail until its XREAD is built from the latest generation.

        The unblock can reach Redis before the tail's XREAD does (it then unblocks nothing,
        and the XREAD would block without the new key), hence the retries.
        """
        attempts = 0
        for _ in range(_NUDGE_SPINS):
            if self._closed or self._built >= self._generation or attempts >= _UNBLOCK_ATTEMPTS:
                return
            client_id = self._client_id
            if self._blocked and client_id is not None:
                attempts += 1
                try:
                    await self._redis.client_unblock(client_id)
                except Exception as exc:
                    log.debug("stream tail: CLIENT UNBLOCK failed: %s", exc)
                    return  # the tail rebuilds within _TAIL_BLOCK_MS anyway
            await asyncio.sleep(0.001)

    async def _run(self) -> None:
        pause = _RETRY_MIN_SECONDS
        while not self._closed:
            try:
                await self._step()
                pause = _RETRY_MIN_SECONDS
            except Exception as exc:
                unexpected = not isinstance(exc, RedisError | OSError)
                log.warning(
                    "stream tail: %s; reconnecting in %.1f s", exc, pause, exc_info=unexpected
                )
                await self._disconnect()
                await asyncio.sleep(pause)
                pause = min(pause * 2, _RETRY_MAX_SECONDS)

    async def _step(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at >= _PRUNE_EVERY_SECONDS:
            self._prune(now)
        if not any(not w.broken for w in self.watches.values()):
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_IDLE_SECONDS):  # then prune the broken ones
                    await self._wake.wait()
            return
        client = await self._connect()
        watched = {key: w for key, w in self.watches.items() if not w.broken}
        request: dict[KeyT, StreamIdT] = {key: w.last_text for key, w in watched.items()}
        self._built = self._generation
        self._blocked = True
        try:
            reply = await client.xread(request, count=_TAIL_COUNT, block=_TAIL_BLOCK_MS)
        finally:
            self._blocked = False
        for key, rows in _streams(reply):
            watch = self.watches.get(key)
            if watch is None or watch is not watched.get(key) or watch.last_text != request[key]:
                continue  # dropped or re-based meanwhile: the next XREAD reads it afresh
            try:
                for entry_id, fields in rows:
                    entry = _entry(entry_id, fields)
                    watch.add(_entry_id(entry.id), entry)
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("stream tail: unreadable entry in %s: %s", key, exc)
                watch.broken = True
            if rows:
                watch.notify()

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for key, watch in list(self.watches.items()):
            idle = now - watch.last_interest
            if watch.waiters == 0 and (
                idle > _IDLE_SECONDS or (watch.done and idle > _DONE_IDLE_SECONDS)
            ):
                del self.watches[key]

    async def _connect(self) -> aioredis.Redis:
        if self._client is None:
            # no retries: a reconnect inside redis-py would change the id CLIENT UNBLOCK needs
            client = aioredis.Redis.from_url(
                self._url,
                decode_responses=True,
                max_connections=1,
                retry=Retry(NoBackoff(), 0),
                socket_timeout=_TAIL_BLOCK_MS / 1000 + 10,  # the XREAD blocks; never time it out
            )
            try:
                self._client_id = int(await client.client_id())
            except BaseException:
                await client.aclose()
                raise
            self._client = client
        return self._client

    async def _disconnect(self) -> None:
        client, self._client, self._client_id = self._client, None, None
        if client is not None:
            try:
                await client.aclose()
            except Exception as exc:
                log.debug("stream tail: closing the connection failed: %s", exc)


def _parse_id(value: str) -> _Id | None:
    """``<ms>-<seq>`` as a pair of ints; None for anything else (e.g. ``$``, ``5``)."""
    ms, sep, seq = value.partition("-")
    if not (sep and ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()):
        return None
    parsed = int(ms), int(seq)
    return parsed if max(parsed) < 2**64 else None


def _entry_id(value: str) -> _Id:
    parsed = _parse_id(value)
    if parsed is None:
        raise ValueError(f"not a stream entry id: {value!r}")
    return parsed


def _id_text(entry_id: _Id) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up and at least 1 (0 means 'forever' to Redis)."""
    return max(1, math.ceil(seconds * 1000))


def _block_seconds(seconds: float) -> float:
    """A blocking-pop timeout in seconds: never 0 (which would block forever), at most
    MAX_BLOCK_SECONDS (callers wait again; the socket timeout stays above it)."""
    return min(_ms(seconds) / 1000, MAX_BLOCK_SECONDS)


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


def _streams(reply: object) -> list[tuple[str, list[Any]]]:
    """Every stream of a multi-key XREAD reply: ``[[key, entries], ...]`` or a dict."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(_text(key), list(rows)) for key, rows in reply.items()]
    return [(_text(row[0]), list(row[1])) for row in cast(list[Any], reply)]


def _entry(entry_id: object, fields: object) -> StreamEntry:
    values = cast(dict[str, str], fields)
    data: dict[str, Any] = json.loads(values["d"])
    return StreamEntry(_text(entry_id), RunEvent(EventKind(values["k"]), data))
