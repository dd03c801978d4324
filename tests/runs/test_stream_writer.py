"""A run's answer written one append ahead (``runs/stream_writer.py``): the next append
starts only once the one before it is confirmed, so an append that fails is never followed
by a later one on the stream, and a delta counts into the run's progress once confirmed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from parley.bus.interface import BusLimits, RunEvent
from parley.bus.memory import MemoryBus
from parley.engines.interface import Delta
from parley.runs.progress import Progress
from parley.runs.stream_writer import StreamWriter
from parley.store.schema import Run

LIMITS = BusLimits(queue_max=5, stream_maxlen=1000, stream_ttl_seconds=60, cancel_ttl_seconds=60)


class _FailingAt(MemoryBus):
    """A bus whose ``n``-th started append fails (as a connection lost under it would)."""

    def __init__(self, n: int) -> None:
        super().__init__(LIMITS)
        self._n = n
        self.started = 0

    def append_soon(
        self, run_id: str, event: RunEvent, *, fence: int | None = None
    ) -> Awaitable[str]:
        self.started += 1
        if self.started != self._n:
            return super().append_soon(run_id, event, fence=fence)
        failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        failed.set_exception(ConnectionError("the bus went away"))
        return failed


async def test_an_append_that_failed_is_followed_by_none_and_its_delta_is_not_counted() -> None:
    bus = _FailingAt(5)
    run = Run(id="run_1", attempts=1)
    progress = Progress(run)
    lost: list[bool] = []

    async def lose() -> None:
        lost.append(True)

    writer = StreamWriter(bus, run, progress, lose)
    written = 0
    with pytest.raises(ConnectionError):
        for i in range(10):
            await writer.write(Delta(f" w{i}", 1))
            written += 1
    assert written == 5  # the 6th write found the 5th append failed and started nothing
    assert bus.started == 5
    entries = await bus.read("run_1", None, timeout=0)
    assert [e.event.data["text"] for e in entries] == [" w0", " w1", " w2", " w3"]
    assert "".join(progress.text) == " w0 w1 w2 w3" and progress.tokens == 4
    assert not lost


async def test_each_delta_counts_once_its_append_is_confirmed_and_a_fenced_out_one_stops() -> None:
    bus = MemoryBus(LIMITS)
    run = Run(id="run_2", attempts=1)
    progress = Progress(run)
    lost: list[bool] = []

    async def lose() -> None:
        lost.append(True)

    writer = StreamWriter(bus, run, progress, lose)
    assert await writer.write(Delta("a", 1))
    assert progress.tokens == 0  # out, not yet confirmed
    assert await writer.write(Delta("b", 1))
    assert progress.tokens == 1
    await bus.raise_fence("run_2", 2)  # another attempt has the run now
    assert await writer.write(Delta("c", 1))  # "b" was appended before the fence rose
    assert not await writer.confirm()  # "c" is refused: the attempt is stale
    assert lost == [True]
    assert "".join(progress.text) == "ab"
    entries = await bus.read("run_2", None, timeout=0)
    assert [e.event.data["text"] for e in entries] == ["a", "b"]
