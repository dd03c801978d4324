"""The in-process bus's per-run event streams.

Each run's stream is a list of (seq, kind, JSON data); entry ids are ``<seq>-0``, so they
look like (and order like) the Redis bus's ids. A stream expires ``stream_ttl_seconds``
after its last append; an expired stream is dropped when looked at, and a new stream sweeps
them all whenever the number of streams reaches a multiple of 64 (not every append: with
64 x k streams alive, every token of every answer swept them all).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from parley.bus.interface import EventKind, RunEvent, StaleAttempt, StreamEntry
from parley.bus.memory.shared import _MemoryOps

_Stored = tuple[int, str, str]


@dataclass(slots=True)
class _Stream:
    # (seq, kind, JSON data): atoms only, so the garbage collector stops tracking them; a
    # stream of live dicts per token made full collections walk every event ever streamed
    entries: list[_Stored] = field(default_factory=list)
    next_seq: int = 1
    expires_at: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class _StreamOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._streams: dict[str, _Stream] = {}
        self._fences: dict[str, tuple[int, float]] = {}  # run -> (fence, expires at)

    async def append(self, run_id: str, event: RunEvent, *, fence: int | None = None) -> str:
        if fence is not None:
            if fence < self._fence(run_id):
                raise StaleAttempt(f"run {run_id}: attempt {fence} is fenced out")
            await self.raise_fence(run_id, fence)
        stream = self._live_stream(run_id)
        if stream is None:
            self._expire_some()  # before the new stream, which has no expiry yet
            stream = self._streams[run_id] = _Stream()
        seq = stream.next_seq
        stream.next_seq += 1
        stream.entries.append((seq, event.kind.value, event.json))
        if len(stream.entries) > self.limits.stream_maxlen:
            del stream.entries[: len(stream.entries) - self.limits.stream_maxlen]
        stream.expires_at = self._clock() + self.limits.stream_ttl_seconds
        stream.changed.set()
        stream.changed = asyncio.Event()
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

    async def raise_fence(self, run_id: str, fence: int) -> None:
        expires = self._clock() + self.limits.stream_ttl_seconds
        self._fences[run_id] = (max(fence, self._fence(run_id)), expires)

    def _fence(self, run_id: str) -> int:
        fence, expires = self._fences.get(run_id, (0, 0.0))
        if expires <= self._clock():
            self._fences.pop(run_id, None)
            return 0
        return fence

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
            for run_id in list(self._fences):
                self._fence(run_id)


def _after(entries: list[_Stored], after_seq: int, count: int) -> list[StreamEntry]:
    """Entries whose seq is above ``after_seq``; seqs are consecutive, so this is a slice."""
    if not entries:
        return []
    start = max(0, after_seq - entries[0][0] + 1)
    return [
        StreamEntry(f"{seq}-0", RunEvent.encoded(EventKind(kind), data))
        for seq, kind, data in entries[start : start + count]
    ]


def _seq(entry_id: str | None) -> int:
    if not entry_id:
        return 0
    return int(entry_id.partition("-")[0])
