"""The Redis bus's stream tail: one blocking ``XREAD`` serves every waiting reader of a
process, so waiting SSE relays hold no pooled connection and a token costs one round trip
for the whole process, not one per reader (``streams.py`` says how reads use it):

* The tail keeps a *watch* per stream key this process has waiting readers for: the id it
  reads after (``last``), the recent entries (a deque of at most ``_CACHE_SIZE``), ``base``
  (every entry after it, up to ``last``, is in the deque), and an event that wakes readers.
* One task, on a dedicated connection, loops on ``XREAD BLOCK 2000 COUNT 512 STREAMS k1 k2
  ... id1 id2 ...`` over all watched keys, appends what comes to the watches and wakes their
  readers. Watches nobody read for ``_IDLE_SECONDS`` (``_DONE_IDLE_SECONDS`` once a ``done``
  event was seen) are dropped; with none left, the task sleeps until one is added. It
  reconnects after errors (with backoff) and resumes from each watch's ``last``.
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
import logging
import time
from collections import deque

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.typing import KeyT, StreamIdT

from parley.bus.interface import EventKind, StreamEntry
from parley.bus.redis.dedicated import cancel_until_done, keep_stepping
from parley.bus.redis.packing import packed_in_c
from parley.bus.redis.shared import _entry, _entry_id, _Id, _id_text, _streams
from parley.deadlines import SharedDeadlines

_CACHE_SIZE = 1024  # entries kept per watched stream
_TAIL_BLOCK_MS = 2000
_TAIL_COUNT = 512
_IDLE_SECONDS = 30.0  # a watch nobody read for this long is dropped
_DONE_IDLE_SECONDS = 5.0  # ... or this long once its ``done`` event was seen
_PRUNE_EVERY_SECONDS = 1.0
_UNBLOCK_ATTEMPTS = 100  # CLIENT UNBLOCKs per nudge at most
_DEADLINE_GRAIN = 0.05  # seconds: a reader's wait times out up to this late
_NUDGE_SPINS = 3000  # ~1 ms sleeps per nudge at most (the tail rebuilds every 2 s anyway)

log = logging.getLogger(__name__)


class _Change:
    """One change of a watch that readers wait for: fired once, then replaced (``notify``).
    A reader's wait is a future, its timeout a place in the tail's ``deadlines``: no timeout
    scope and no timer per wait (at a thousand streams a token each, each was a visible
    share of the relay)."""

    __slots__ = ("fired", "waiting")

    def __init__(self) -> None:
        self.fired = False
        self.waiting: list[asyncio.Future[bool]] = []

    def fire(self) -> None:
        self.fired = True
        for waiter in self.waiting:
            if not waiter.done():
                waiter.set_result(True)
        self.waiting.clear()

    async def wait(self, timeout: float, deadlines: SharedDeadlines[bool]) -> bool:
        """True once fired, False after ``timeout`` seconds (up to ``_DEADLINE_GRAIN`` late)."""
        if self.fired:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        slot = deadlines.add(waiter, asyncio.get_running_loop().time() + timeout)
        try:
            return await waiter
        finally:
            deadlines.discard(slot, waiter)
            if not self.fired:
                self.waiting.remove(waiter)


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
        self.changed = _Change()
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
        self.changed.fire()
        self.changed = _Change()

    async def wait(
        self, changed: _Change, timeout: float, deadlines: SharedDeadlines[bool]
    ) -> bool:
        """Wait (counted as a waiter) for ``changed``, taken from ``self.changed`` before
        the reader last looked; False after ``timeout`` seconds."""
        self.waiters += 1
        try:
            return await changed.wait(timeout, deadlines)
        finally:
            self.waiters -= 1


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
        self.deadlines = SharedDeadlines(_DEADLINE_GRAIN, False)  # of the readers' waits

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
        await cancel_until_done([self._task, self._nudger])
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
        await keep_stepping(
            self._step,
            what="stream tail",
            running=lambda: not self._closed,
            after_failure=self._disconnect,
        )

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
            packed_in_c(client.connection_pool)  # (its XREAD names every watched stream)
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
