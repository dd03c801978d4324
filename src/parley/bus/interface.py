"""The bus contract and the messages that cross it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from parley.errors import Unavailable


class EventKind(StrEnum):
    """SSE event names of a run's stream."""

    STATUS = "status"
    DELTA = "delta"
    ERROR = "error"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class RunEvent:
    kind: EventKind
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One event of a run's stream; ``id`` is the SSE event id (ordered, opaque)."""

    id: str
    event: RunEvent


@dataclass(frozen=True, slots=True)
class QueuedRun:
    run_id: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class BusLimits:
    queue_max: int = 1000
    stream_maxlen: int = 20_000
    stream_ttl_seconds: float = 3600.0
    cancel_ttl_seconds: float = 3600.0


class QueueFull(Unavailable):
    code = "queue_full"


class Bus(Protocol):
    """Everything processes tell each other about runs. All methods are coroutine-safe."""

    limits: BusLimits

    async def ping(self) -> None: ...

    async def close(self) -> None: ...

    # -- the run queue: bounded, highest priority first, then oldest ------------------------

    async def enqueue(self, item: QueuedRun) -> None:
        """Queue a run; a run already queued stays once. Raises QueueFull when full."""

    async def dequeue(self, timeout: float) -> QueuedRun | None:
        """Take the next run, waiting up to ``timeout`` seconds; None if none came."""

    async def remove(self, run_id: str) -> bool:
        """Take a run out of the queue; False if it was not queued."""

    async def queue_depth(self) -> dict[int, int]:
        """Queued runs by priority."""

    # -- per-run event streams --------------------------------------------------------------

    async def append(self, run_id: str, event: RunEvent) -> str:
        """Append an event; returns its id. The stream expires stream_ttl after its last event."""

    async def read(
        self, run_id: str, after: str | None, *, timeout: float, count: int = 512
    ) -> list[StreamEntry]:
        """Entries after ``after`` (all if None), waiting up to ``timeout`` s for a first one."""

    async def stream_exists(self, run_id: str) -> bool: ...

    # -- cancel signals ---------------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> None: ...

    async def cancel_requested(self, run_id: str) -> bool: ...

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        """True as soon as a cancel is requested, False after ``timeout`` seconds."""

    # -- open SSE streams per user ----------------------------------------------------------

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        """Hold one of the user's ``limit`` stream slots for ``ttl`` s; False if all are held."""

    async def close_stream(self, user_id: str, stream_id: str) -> None: ...


def valid_entry_id(value: str) -> bool:
    """Entry ids look like Redis stream ids: ``<ms>-<seq>``."""
    ms, sep, seq = value.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit() and len(value) <= 41
