"""``MemoryBus``: the bus's sections as asyncio structures of one process."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from parley.bus.interface import BusLimits, HeldRun
from parley.bus.memory.budget import _BudgetOps
from parley.bus.memory.cancel import _CancelOps
from parley.bus.memory.inputs import _InputOps
from parley.bus.memory.load import _LoadOps
from parley.bus.memory.queue import _QueueOps
from parley.bus.memory.slots import _SlotOps
from parley.bus.memory.streams import _StreamOps
from parley.bus.memory.throttle import _ThrottleOps
from parley.bus.memory.writes import _WriteOps


class MemoryBus(
    _QueueOps,
    _StreamOps,
    _CancelOps,
    _SlotOps,
    _LoadOps,
    _BudgetOps,
    _ThrottleOps,
    _WriteOps,
    _InputOps,
):
    """The in-process bus (the embedded default). Each section (the base classes) lives in
    its own module, with its state."""

    def __init__(
        self, limits: BusLimits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or BusLimits()
        self._clock = clock
        super().__init__()  # each section sets up its state

    async def refresh_held(self, runs: Sequence[HeldRun], *, ttl: float) -> None:
        for run in runs:
            await self.refresh_user_run(run.user_id, run.slot, ttl=ttl)
            await self.refresh_run(run.model, run.run_id, ttl=ttl)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
