"""What every part of the in-process bus shares: the limits and the clock."""

from __future__ import annotations

from collections.abc import Callable

from parley.bus.interface import BusLimits


class _MemoryOps:
    """The base of the bus's sections. Each section sets up its own state in ``__init__``
    and passes on to the next (``super().__init__()``)."""

    limits: BusLimits
    _clock: Callable[[], float]  # monotonic seconds; expiries are measured on it
