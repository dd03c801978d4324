"""The in-process bus's run queue: bounded, highest priority first, then oldest.

A heap of (-priority, order, run id) and a dict of the runs queued now (run id -> (priority,
order)); a removed run stays in the heap and is skipped when it comes up (also after it was
queued again: only the heap entry of its latest order counts).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from parley.bus.interface import QueuedRun, QueueFull
from parley.bus.memory.shared import _MemoryOps
from parley.domain import BACKGROUND_PRIORITY


class _QueueOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[int, int, str]] = []
        self._queued: dict[str, tuple[int, int]] = {}
        self._order = itertools.count()
        self._queue_changed = asyncio.Condition()

    async def enqueue(self, item: QueuedRun) -> None:
        async with self._queue_changed:
            if item.run_id in self._queued:
                return
            if len(self._queued) >= self.limits.queue_max:
                raise QueueFull("the run queue is full", retry_after=1.0)
            order = next(self._order)
            self._queued[item.run_id] = (item.priority, order)
            heapq.heappush(self._heap, (-item.priority, order, item.run_id))
            self._queue_changed.notify()

    async def dequeue(
        self, timeout: float, *, min_priority: int = BACKGROUND_PRIORITY
    ) -> QueuedRun | None:
        async with self._queue_changed:
            if not self._has_work(min_priority):
                try:
                    waiting = self._queue_changed.wait_for(lambda: self._has_work(min_priority))
                    await asyncio.wait_for(waiting, max(timeout, 0))
                except TimeoutError:
                    return None
            while self._heap:
                entry = heapq.heappop(self._heap)
                _, order, run_id = entry
                queued = self._queued.get(run_id)
                if queued is None or queued[1] != order:
                    continue  # removed, or queued again since
                if queued[0] < min_priority:  # the best queued is below it: nothing is
                    heapq.heappush(self._heap, entry)
                    return None
                del self._queued[run_id]
                return QueuedRun(run_id, queued[0])
            return None

    def _has_work(self, min_priority: int = BACKGROUND_PRIORITY) -> bool:
        if min_priority <= BACKGROUND_PRIORITY:
            return bool(self._queued)
        return any(priority >= min_priority for priority, _ in self._queued.values())

    async def remove(self, run_id: str) -> bool:
        async with self._queue_changed:
            # the heap entry is skipped lazily at dequeue
            return self._queued.pop(run_id, None) is not None

    async def queue_length(self) -> int:
        return len(self._queued)

    async def queue_depth(self) -> dict[int, int]:
        depth: dict[int, int] = {}
        for priority, _ in self._queued.values():
            depth[priority] = depth.get(priority, 0) + 1
        return depth
