"""Futures that time out at deadlines rounded up to a grain: one timer per grain for every
wait ending in it, however many. At a thousand streams a token each, a timer made (and
cancelled) per wait was a visible share of the CPU per token (docs/SERVICE_PROFILE.md);
the relay's readers (``bus/redis/tail.py``) and the fake engine's pacing share this."""

from __future__ import annotations

import asyncio
import math
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedDeadlines(Generic[T]):
    """Each waiter, if still pending, given ``result`` at its deadline (up to ``grain``
    seconds late); a waiter that ends otherwise leaves its grain (``discard``)."""

    def __init__(self, grain: float, result: T) -> None:
        self._grain = grain
        self._result = result
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: dict[int, set[asyncio.Future[T]]] = {}

    def add(self, waiter: asyncio.Future[T], when: float) -> int:
        """``waiter`` ends at the loop's time ``when`` at the latest; its grain."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # (a new loop: the old one's timers will not fire)
            self._loop, self._due = loop, {}
        slot = math.ceil(when / self._grain)
        waiting = self._due.get(slot)
        if waiting is None:
            waiting = self._due[slot] = set()
            loop.call_at(slot * self._grain, self._end, slot)
        waiting.add(waiter)
        return slot

    def discard(self, slot: int, waiter: asyncio.Future[T]) -> None:
        waiting = self._due.get(slot)
        if waiting is not None:
            waiting.discard(waiter)

    def waiting(self) -> int:
        """Waiters still pending in a grain."""
        return sum(len(w) for w in self._due.values())

    def _end(self, slot: int) -> None:
        for waiter in self._due.pop(slot, ()):
            if not waiter.done():
                waiter.set_result(self._result)
