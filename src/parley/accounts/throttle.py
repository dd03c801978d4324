"""Slowing down repeated failed logins.

Each key (the account's email, the client's address) may fail ``free_failures``
times within ``window``; after that every further attempt must wait
2^(failures - free_failures) seconds after the last failure, up to
``max_delay``. A success clears the email's record. The in-process
implementation suits one api process; a shared one comes with the bus.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol


class LoginThrottle(Protocol):
    def retry_after(self, keys: Iterable[str]) -> float | None:
        """Seconds the caller must wait before trying again, or None."""

    def failed(self, keys: Iterable[str]) -> None: ...

    def succeeded(self, key: str) -> None: ...


@dataclass(slots=True)
class _Record:
    failures: int
    first_at: float
    last_at: float


class MemoryLoginThrottle:
    MAX_KEYS = 100_000

    def __init__(
        self,
        *,
        free_failures: int,
        window: float,
        max_delay: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._free = free_failures
        self._window = window
        self._max_delay = max_delay
        self._clock = clock
        self._records: dict[str, _Record] = {}

    def retry_after(self, keys: Iterable[str]) -> float | None:
        now = self._clock()
        waits = [w for k in keys if (w := self._wait(k, now)) is not None]
        return max(waits) if waits else None

    def failed(self, keys: Iterable[str]) -> None:
        now = self._clock()
        for key in keys:
            record = self._live(key, now)
            if record is None:
                self._records[key] = _Record(failures=1, first_at=now, last_at=now)
            else:
                record.failures += 1
                record.last_at = now
        if len(self._records) > self.MAX_KEYS:
            self._prune(now)

    def succeeded(self, key: str) -> None:
        self._records.pop(key, None)

    def _wait(self, key: str, now: float) -> float | None:
        record = self._live(key, now)
        if record is None or record.failures < self._free:
            return None
        delay = min(2.0 ** (record.failures - self._free), self._max_delay)
        remaining = record.last_at + delay - now
        return remaining if remaining > 0 else None

    def _live(self, key: str, now: float) -> _Record | None:
        record = self._records.get(key)
        if record is not None and now - record.last_at > max(self._window, self._max_delay):
            del self._records[key]
            return None
        return record

    def _prune(self, now: float) -> None:
        for key in list(self._records):
            self._live(key, now)
