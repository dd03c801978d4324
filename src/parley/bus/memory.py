"""The in-process bus: asyncio structures for one process (the embedded default)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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

_Stored = tuple[int, str, str]


@dataclass(slots=True)
class _Stream:
    # (seq, kind, JSON data): atoms only, so the garbage collector stops tracking them; a
    # stream of live dicts per token made full collections walk every event ever streamed
    entries: list[_Stored] = field(default_factory=list)
    next_seq: int = 1
    expires_at: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MemoryBus:
    def __init__(
        self, limits: BusLimits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or BusLimits()
        self._clock = clock
        self._heap: list[tuple[int, int, str]] = []
        self._queued: dict[str, int] = {}
        self._order = itertools.count()
        self._queue_changed = asyncio.Condition()
        self._streams: dict[str, _Stream] = {}
        self._cancels: dict[str, float] = {}
        self._cancel_events: dict[str, asyncio.Event] = {}
        self._slots: dict[str, dict[str, float]] = {}
        self._budgets: dict[str, tuple[float, float]] = {}  # user -> (tokens, as of when)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # -- queue -----------------------------------------------------------------------------

    async def enqueue(self, item: QueuedRun) -> None:
        async with self._queue_changed:
            if item.run_id in self._queued:
                return
            if len(self._queued) >= self.limits.queue_max:
                raise QueueFull("the run queue is full", retry_after=1.0)
            self._queued[item.run_id] = item.priority
            heapq.heappush(self._heap, (-item.priority, next(self._order), item.run_id))
            self._queue_changed.notify()

    async def dequeue(self, timeout: float) -> QueuedRun | None:
        async with self._queue_changed:
            try:
                await asyncio.wait_for(self._queue_changed.wait_for(self._has_work), timeout)
            except TimeoutError:
                return None
            while self._heap:
                _, _, run_id = heapq.heappop(self._heap)
                priority = self._queued.pop(run_id, None)
                if priority is not None:
                    return QueuedRun(run_id, priority)
            return None

    def _has_work(self) -> bool:
        return bool(self._queued)

    async def remove(self, run_id: str) -> bool:
        async with self._queue_changed:
            # the heap entry is skipped lazily at dequeue
            return self._queued.pop(run_id, None) is not None

    async def queue_depth(self) -> dict[int, int]:
        depth: dict[int, int] = {}
        for priority in self._queued.values():
            depth[priority] = depth.get(priority, 0) + 1
        return depth

    # -- streams ---------------------------------------------------------------------------

    async def append(self, run_id: str, event: RunEvent) -> str:
        stream = self._live_stream(run_id)
        if stream is None:
            stream = self._streams[run_id] = _Stream()
        seq = stream.next_seq
        stream.next_seq += 1
        stream.entries.append((seq, event.kind.value, json.dumps(event.data)))
        if len(stream.entries) > self.limits.stream_maxlen:
            del stream.entries[: len(stream.entries) - self.limits.stream_maxlen]
        stream.expires_at = self._clock() + self.limits.stream_ttl_seconds
        stream.changed.set()
        stream.changed = asyncio.Event()
        self._expire_some()
        return f"{seq}-0"

    async def read(
        self, run_id: str, after: str | None, *, timeout: float, count: int = 512
    ) -> list[StreamEntry]:
        after_seq = _seq(after)
        deadline = self._clock() + timeout
        while True:
            stream = self._live_stream(run_id)
            if stream is not None:
                found = _after(stream.entries, after_seq, count)
                if found:
                    return found
                waiter = stream.changed
            else:
                waiter = None
            remaining = deadline - self._clock()
            if remaining <= 0:
                return []
            if waiter is None:
                await asyncio.sleep(min(remaining, 0.05))
                continue
            try:
                async with asyncio.timeout(remaining):
                    await waiter.wait()
            except TimeoutError:
                return []

    async def stream_exists(self, run_id: str) -> bool:
        return self._live_stream(run_id) is not None

    def _live_stream(self, run_id: str) -> _Stream | None:
        stream = self._streams.get(run_id)
        if stream is not None and stream.expires_at <= self._clock():
            del self._streams[run_id]
            return None
        return stream

    def _expire_some(self) -> None:
        if len(self._streams) % 64 == 0:
            for run_id in list(self._streams):
                self._live_stream(run_id)

    # -- cancel ----------------------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> None:
        self._cancels[run_id] = self._clock() + self.limits.cancel_ttl_seconds
        self._cancel_event(run_id).set()

    async def cancel_requested(self, run_id: str) -> bool:
        expires = self._cancels.get(run_id)
        if expires is None:
            return False
        if expires <= self._clock():
            del self._cancels[run_id]
            self._cancel_events.pop(run_id, None)
            return False
        return True

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        if await self.cancel_requested(run_id):
            return True
        event = self._cancel_event(run_id)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            if not event.is_set():
                self._cancel_events.pop(run_id, None)
        return True

    def _cancel_event(self, run_id: str) -> asyncio.Event:
        event = self._cancel_events.get(run_id)
        if event is None:
            event = self._cancel_events[run_id] = asyncio.Event()
        return event

    # -- per-user stream slots -------------------------------------------------------------

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        now = self._clock()
        slots = {k: v for k, v in self._slots.get(user_id, {}).items() if v > now}
        if stream_id not in slots and len(slots) >= limit:
            self._slots[user_id] = slots
            return False
        slots[stream_id] = now + ttl
        self._slots[user_id] = slots
        return True

    async def close_stream(self, user_id: str, stream_id: str) -> None:
        slots = self._slots.get(user_id)
        if slots is not None:
            slots.pop(stream_id, None)
            if not slots:
                del self._slots[user_id]

    # -- per-user token budgets ------------------------------------------------------------

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        tokens = self._tokens(user_id, bucket)
        if tokens < amount:
            balance = TokenBalance(tokens, bucket)
            return TokenReservation(False, balance, bucket.seconds_until(tokens, amount))
        return TokenReservation(True, self._store_tokens(user_id, tokens - amount, bucket))

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        tokens = min(float(bucket.capacity), self._tokens(user_id, bucket) + reserved - used)
        return self._store_tokens(user_id, tokens, bucket)

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        return TokenBalance(self._tokens(user_id, bucket), bucket)

    def _tokens(self, user_id: str, bucket: TokenBucket) -> float:
        """The balance now: the stored one plus the refill since, up to the capacity."""
        stored = self._budgets.get(user_id)
        if stored is None:
            return float(bucket.capacity)
        tokens, at = stored
        refill = max(0.0, self._clock() - at) * bucket.per_minute / 60
        return min(float(bucket.capacity), tokens + refill)

    def _store_tokens(self, user_id: str, tokens: float, bucket: TokenBucket) -> TokenBalance:
        if tokens >= bucket.capacity:
            self._budgets.pop(user_id, None)  # a full bucket is a missing one
        else:
            self._budgets[user_id] = (tokens, self._clock())
        return TokenBalance(tokens, bucket)


def _after(entries: list[_Stored], after_seq: int, count: int) -> list[StreamEntry]:
    """Entries whose seq is above ``after_seq``; seqs are consecutive, so this is a slice."""
    if not entries:
        return []
    start = max(0, after_seq - entries[0][0] + 1)
    return [
        StreamEntry(f"{seq}-0", RunEvent(EventKind(kind), json.loads(data)))
        for seq, kind, data in entries[start : start + count]
    ]


def _seq(entry_id: str | None) -> int:
    if not entry_id:
        return 0
    return int(entry_id.partition("-")[0])
