"""The in-process bus's load per model: runs in flight (with expiries), the slots each
engine offers (with expiries), and when runs ended (for the drain rate)."""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

from parley.bus.interface import LoadAdmission, ModelLoad
from parley.bus.memory.shared import _MemoryOps

DRAIN_MEMORY_SECONDS = 300.0  # ends remembered for the drain rate; a window is at most this


class _LoadOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._in_flight: dict[str, dict[str, float]] = {}  # model -> run id -> expiry
        self._offers: dict[str, dict[str, tuple[int, float]]] = {}  # model -> source -> ...
        self._ends: dict[str, deque[float]] = {}  # model -> times runs ended, oldest first

    async def admit_run(
        self, model: str, run_id: str, *, max_load: float | None, ttl: float, window: float
    ) -> LoadAdmission:
        load = self._load(model, window)
        runs = self._in_flight.setdefault(model, {})
        over = (
            max_load is not None and load.slots > 0 and load.in_flight + 1 > max_load * load.slots
        )
        if over and run_id not in runs:
            return LoadAdmission(False, load)
        runs[run_id] = self._clock() + ttl
        return LoadAdmission(True, load)

    async def refresh_run(self, model: str, run_id: str, *, ttl: float) -> bool:
        now = self._clock()
        runs = self._in_flight.get(model, {})
        if runs.get(run_id, now) <= now:
            return False
        runs[run_id] = now + ttl
        return True

    async def release_run(self, model: str, run_id: str, *, drained: bool) -> None:
        runs = self._in_flight.get(model, {})
        if runs.pop(run_id, None) is not None and drained:
            self._ends.setdefault(model, deque()).append(self._clock())

    async def offer_capacity(self, model: str, source: str, slots: int, *, ttl: float) -> None:
        self._offers.setdefault(model, {})[source] = (slots, self._clock() + ttl)

    async def model_load(self, model: str, *, window: float) -> ModelLoad:
        return self._load(model, window)

    def _load(self, model: str, window: float) -> ModelLoad:
        now = self._clock()
        runs = {k: v for k, v in self._in_flight.get(model, {}).items() if v > now}
        self._in_flight[model] = runs
        offers = {k: v for k, v in self._offers.get(model, {}).items() if v[1] > now}
        self._offers[model] = offers
        ends = self._ends.setdefault(model, deque())
        while ends and ends[0] <= now - DRAIN_MEMORY_SECONDS:
            ends.popleft()
        since = now - min(window, DRAIN_MEMORY_SECONDS)
        first = bisect_right(ends, since)
        span = now - ends[first] if first < len(ends) else 0.0
        slots = sum(s for s, _ in offers.values())
        return ModelLoad(len(runs), slots, len(ends) - first, window, span)
