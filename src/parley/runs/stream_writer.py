"""A run's answer written to its stream one append ahead.

Each delta's append goes out at once, and the worker reads the engine's next delta while it
is out, instead of waking once more per token for its answer; the next append starts only
once the one before it is confirmed. So nothing is ever applied after an append that failed
(the stream has no gap), the appends keep their order, and an attempt fenced out is seen at
its next delta at most (the bus refuses its appends meanwhile: nothing of it slips in). A
delta counts into the run's progress once its append is confirmed, as when each was awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from parley.bus.interface import Bus, StaleAttempt
from parley.engines.interface import Delta
from parley.runs.events import delta_events
from parley.runs.progress import Progress
from parley.store.schema import Run

log = logging.getLogger(__name__)


class StreamWriter:
    """One model step's deltas to the run's stream, under its attempt's fence. ``lose``:
    what the worker does when the attempt turns out stale (stop the run, abort the engine)."""

    def __init__(
        self, bus: Bus, run: Run, progress: Progress, lose: Callable[[], Awaitable[None]]
    ) -> None:
        self._bus, self._run, self._progress, self._lose = bus, run, progress, lose
        self._out: tuple[Awaitable[str], Delta] | None = None  # the append not yet confirmed

    async def write(self, delta: Delta) -> bool:
        """Confirm the append out, then start this delta's; False if the attempt is stale."""
        if not await self.confirm():
            return False
        events = delta_events(delta)
        if not events:
            self._progress.take(delta)
            return True
        run_id, fence = self._run.id, self._run.attempts
        try:
            for event in events[:-1]:  # (reasoning, text and calls in one delta: rare)
                await self._bus.append(run_id, event, fence=fence)
        except StaleAttempt:
            return await self._stale()
        self._out = (self._bus.append_soon(run_id, events[-1], fence=fence), delta)
        return True

    async def confirm(self) -> bool:
        """The append out confirmed and its delta counted; False if the attempt is stale.
        An error of the bus's is raised, the delta not counted."""
        if self._out is None:
            return True
        out, delta = self._out
        self._out = None
        try:
            await out
        except StaleAttempt:
            return await self._stale()
        self._progress.take(delta)
        return True

    def abandon(self) -> None:
        """The step ended by an error: an append still out is left to finish on its own
        (its outcome retrieved, so that nothing is reported as never looked at)."""
        if self._out is not None:
            asyncio.ensure_future(self._out[0]).add_done_callback(_retrieved)
            self._out = None

    async def _stale(self) -> bool:
        log.warning("run %s: attempt %d is stale; stopping", self._run.id, self._run.attempts)
        await self._lose()
        return False


def _retrieved(done: asyncio.Future[str]) -> None:
    if not done.cancelled():
        done.exception()
