"""The runs one worker generates at once: its run slots (not a user's run slots, which the
bus counts across workers, nor the engine's sequence slots).

``take`` waits for a slot; ``try_take`` takes one only if one is free now (a hand-off from
this process's submitter never waits); ``give_back`` frees one, to the first waiter if there
is one. ``free`` says how many are free: the top tier's reserve is judged by it.
"""

from __future__ import annotations

import asyncio
from collections import deque


class RunSlots:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a worker needs at least one run slot")
        self.size = size
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    def try_take(self) -> bool:
        """Take a slot if one is free now (never ahead of a waiter)."""
        if self._free == 0 or self._waiters:
            return False
        self._free -= 1
        return True

    async def take(self) -> None:
        """Take a slot, waiting for one to be given back if none is free."""
        if self.try_take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # handed a slot as it was cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to it
                return
        if self._free >= self.size:
            raise RuntimeError("a run slot was given back that was never taken")
        self._free += 1
