"""The in-process bus's attempt throttles (logins, sign-ups): a count and the time of the
latest attempt per key, forgotten ``backoff.lifetime`` seconds after that attempt."""

from __future__ import annotations

from parley.bus.interface import Attempt, Backoff
from parley.bus.memory.shared import _MemoryOps

MAX_RECORDS = 100_000  # past this, forgotten records are swept out


class _ThrottleOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        # key -> (attempts, when the latest went ahead, when the record is forgotten)
        self._attempts: dict[str, tuple[int, float, float]] = {}

    async def attempt(self, key: str, backoff: Backoff, *, refuse: bool = True) -> Attempt:
        now = self._clock()
        count, latest, _ = self._live_record(key, now) or (0, now, now)
        wait = min(max(0.0, latest + backoff.delay(count) - now), backoff.max_delay)
        if wait > 0 and refuse:
            return Attempt(False, count, wait)
        at = now + wait  # a held attempt counts from when it goes ahead
        self._attempts[key] = (count + 1, at, at + backoff.lifetime)
        if len(self._attempts) > MAX_RECORDS:
            self._sweep(now)
        return Attempt(True, count + 1, wait)

    async def forget_attempts(self, key: str) -> None:
        self._attempts.pop(key, None)

    async def attempts(self, key: str) -> int:
        record = self._live_record(key, self._clock())
        return 0 if record is None else record[0]

    def _live_record(self, key: str, now: float) -> tuple[int, float, float] | None:
        record = self._attempts.get(key)
        if record is not None and record[2] <= now:
            del self._attempts[key]
            return None
        return record

    def _sweep(self, now: float) -> None:
        for key in [k for k, (_, _, until) in self._attempts.items() if until <= now]:
            del self._attempts[key]
