"""The in-process bus's cancel signals: a flag with an expiry, and an event to wait on."""

from __future__ import annotations

import asyncio

from parley.bus.memory.shared import _MemoryOps


class _CancelOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._cancels: dict[str, float] = {}  # run -> when the flag expires
        self._cancel_events: dict[str, asyncio.Event] = {}

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
