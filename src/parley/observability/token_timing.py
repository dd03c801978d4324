"""A run's tokens timed as they come: its time to first token, and the gaps between tokens.

The gaps go to a histogram a run at a time, not a token at a time: in multiprocess mode
(the split stack) each ``observe`` locks and writes the process's shared metrics file twice
(the sum and a bucket), a visible share of the worker's CPU per token at a thousand streams
(docs/SERVICE_PROFILE.md). So a run's gaps are counted into its own bucket counts and added
to the histogram every ``FLUSH_EVERY`` tokens and when the run's stream ends (``close``):
the same counts and sum as one ``observe`` per gap, a few seconds later at most.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from parley.domain import utcnow
from parley.engines.interface import Delta

FLUSH_EVERY = 64  # gaps counted locally before they are added to the histogram


class Timer(Protocol):
    def see(self, delta: Delta) -> None: ...
    def close(self) -> None: ...


class Untimed:
    """The timer of a process without metrics: times nothing."""

    def see(self, delta: Delta) -> None:
        pass

    def close(self) -> None:
        pass


UNTIMED = Untimed()


class TokenTimer:
    """The first token timed from the run's submission (the submitting host's clock), the
    gaps between tokens on this one's. ``ttft``, ``itl``: a histogram's labelled child."""

    def __init__(
        self, ttft: Any, itl: Any, submitted: datetime, clock: Callable[[], float] | None = None
    ) -> None:
        self._ttft = ttft
        self._itl = itl
        self._submitted = submitted
        self._clock = clock or asyncio.get_running_loop().time
        self._last: float | None = None
        self._bounds: list[float] = list(itl._upper_bounds)  # (the last one is +Inf)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._counted = 0

    def see(self, delta: Delta) -> None:
        if delta.tokens <= 0:
            return
        now = self._clock()
        last, self._last = self._last, now
        if last is None:
            self._ttft.observe(max(0.0, (utcnow() - self._submitted).total_seconds()))
            return
        gap = (now - last) / delta.tokens  # each token of the delta one gap
        self._counts[bisect.bisect_left(self._bounds, gap)] += delta.tokens
        self._sum += gap * delta.tokens
        self._counted += delta.tokens
        if self._counted >= FLUSH_EVERY:
            self.close()

    def close(self) -> None:
        """Add the gaps counted so far to the histogram (again after more are seen)."""
        if not self._counted:
            return
        self._itl._sum.inc(self._sum)
        for bucket, count in zip(self._itl._buckets, self._counts, strict=True):
            if count:
                bucket.inc(count)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._counted = 0
