"""The bus contract and the messages that cross it (a run's stream events: ``events.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from parley.bus.events import EventKind as EventKind
from parley.bus.events import RunEvent as RunEvent
from parley.bus.events import StreamEntry as StreamEntry
from parley.domain import BACKGROUND_PRIORITY
from parley.errors import Unavailable


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
    # appends queued while one round trip is out go together in the next (Redis: one
    append_batching: bool = True  # pipelined round trip for every run, not one per token)


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """The shape of one user's token budget: holds up to ``capacity`` tokens and refills
    continuously at ``per_minute`` tokens a minute (a missing bucket is a full one)."""

    capacity: int
    per_minute: int

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.per_minute <= 0:
            raise ValueError("a token bucket needs a positive capacity and refill rate")

    def seconds_until(self, balance: float, level: float) -> float:
        """Seconds until ``balance`` refills to ``level``; 0.0 if it is there already."""
        return max(0.0, (level - balance) * 60 / self.per_minute)


@dataclass(frozen=True, slots=True)
class TokenBalance:
    """A bucket's balance at one moment; negative after a run used more than it reserved."""

    tokens: float
    bucket: TokenBucket

    @property
    def seconds_to_full(self) -> float:
        return self.bucket.seconds_until(self.tokens, self.bucket.capacity)


@dataclass(frozen=True, slots=True)
class TokenReservation:
    """The answer to a reservation: taken (``balance`` is what is left) or refused
    (``balance`` is untouched and ``retry_after`` says when it would cover the amount)."""

    granted: bool
    balance: TokenBalance
    retry_after: float = 0.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """A throttle's schedule: ``free`` attempts, then each further one at least
    2^(attempts - free) seconds after the one before, at most ``max_delay``; a record is
    forgotten ``forget_after`` seconds after its latest attempt (never before its delay)."""

    free: int
    max_delay: float
    forget_after: float

    def __post_init__(self) -> None:
        if self.free < 0 or self.max_delay <= 0 or self.forget_after <= 0:
            raise ValueError("a backoff needs free >= 0 and a positive delay and lifetime")

    @property
    def lifetime(self) -> float:
        """Seconds a record outlives its latest attempt."""
        return max(self.forget_after, self.max_delay)

    def delay(self, attempts: int) -> float:
        """The least time between the latest of ``attempts`` attempts and the next one."""
        if attempts < self.free:
            return 0.0
        return min(2.0 ** min(attempts - self.free, 64), self.max_delay)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The answer to an attempt: ``allowed`` (recorded) or refused (nothing recorded);
    ``attempts`` is the record's count after it; ``wait`` how much too early it came (0.0
    when on time, at most the backoff's ``max_delay``): for a refused attempt its
    ``Retry-After``, for one let through early how long to hold it."""

    allowed: bool
    attempts: int
    wait: float = 0.0


MIN_DRAIN_SPAN = 1.0


@dataclass(frozen=True, slots=True)
class ModelLoad:
    """A model's load now, as every process sees it on the bus."""

    in_flight: int  # runs admitted and not ended: queued or running
    slots: int  # what its engines serve at once, as they last said (0: none has said)
    drained: int  # runs that ended in the last ``window`` seconds
    window: float
    span: float = 0.0  # seconds since the oldest of those ended (at most ``window``)

    @property
    def load(self) -> float:
        """(queued + running) ÷ slots; 0.0 while no engine has said its slots (unknown)."""
        return self.in_flight / self.slots if self.slots else 0.0

    @property
    def drain_rate(self) -> float:
        """Runs ended per second, lately: over the time since the oldest end in the window
        (at least a second), not the whole window, so a model that has only just become
        busy is not taken to drain slower than it does."""
        return self.drained / max(self.span, MIN_DRAIN_SPAN) if self.drained else 0.0


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run a worker holds: its user's run slot (``slot``: the slot's name) and its count
    in its model's load, refreshed together at each lease renewal (``refresh_held``)."""

    user_id: str
    slot: str
    model: str
    run_id: str


@dataclass(frozen=True, slots=True)
class LoadAdmission:
    """The answer to ``admit_run``: counted in (``admitted``) or not, and the load it saw
    (before counting the run)."""

    admitted: bool
    load: ModelLoad


class QueueFull(Unavailable):
    code = "queue_full"


class StaleAttempt(Exception):
    """An append fenced with an attempt older than the run's stream accepts now."""


class RunQueue(Protocol):
    """The bus's section for the run queue: bounded, highest priority first, then oldest."""

    async def enqueue(self, item: QueuedRun) -> None:
        """Queue a run; a run already queued stays once. Raises QueueFull when full."""

    async def dequeue(
        self, timeout: float, *, min_priority: int = BACKGROUND_PRIORITY
    ) -> QueuedRun | None:
        """Take the next run of at least ``min_priority``, waiting up to ``timeout`` seconds;
        None if none came (runs of lower priority stay queued)."""

    async def remove(self, run_id: str) -> bool:
        """Take a run out of the queue; False if it was not queued."""

    async def queue_length(self) -> int:
        """Queued runs, all priorities; O(1)."""

    async def queue_depth(self) -> dict[int, int]:
        """Queued runs by priority (for metrics; ``queue_length`` is cheaper for a total)."""


class RunStreams(Protocol):
    """The bus's section for per-run event streams."""

    async def append(self, run_id: str, event: RunEvent, *, fence: int | None = None) -> str:
        """Append an event; returns its id. The stream expires stream_ttl after its last event.

        ``fence``: the attempt of the run the appender works for (a fencing token). An
        append fenced below the stream's fence raises StaleAttempt and appends nothing; one
        fenced above it raises the fence to it. Unfenced appends are always taken.
        """

    async def raise_fence(self, run_id: str, fence: int) -> None:
        """Refuse appends fenced below ``fence`` from now on (a no-op if it is that high)."""

    async def read(
        self, run_id: str, after: str | None, *, timeout: float, count: int = 512
    ) -> list[StreamEntry]:
        """Entries after ``after`` (all if None), waiting up to ``timeout`` s for a first one."""

    async def stream_exists(self, run_id: str) -> bool: ...


class CancelSignals(Protocol):
    """The bus's section for cancel signals."""

    async def request_cancel(self, run_id: str) -> None: ...

    async def cancel_requested(self, run_id: str) -> bool: ...

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        """True as soon as a cancel is requested, False after ``timeout`` seconds."""


class OpenStreams(Protocol):
    """The bus's section for open SSE streams per user."""

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        """Count one of the user's at most ``limit`` open streams for ``ttl`` s; False if
        ``limit`` are open."""

    async def close_stream(self, user_id: str, stream_id: str) -> None: ...


class UserRuns(Protocol):
    """The bus's section for runs in flight per user."""

    async def hold_user_run(self, user_id: str, run_id: str, *, limit: int, ttl: float) -> bool:
        """Count ``run_id`` among the user's at most ``limit`` runs in flight for ``ttl`` s (a
        run counted already is refreshed, whatever the limit); False if ``limit`` are."""

    async def refresh_user_run(self, user_id: str, run_id: str, *, ttl: float) -> bool:
        """Count ``run_id`` in flight for ``ttl`` s from now; False (and nothing counted) if
        it is not counted (released already, or lapsed)."""

    async def release_user_run(self, user_id: str, run_id: str) -> None: ...

    async def refresh_held(self, runs: Sequence[HeldRun], *, ttl: float) -> None:
        """``refresh_user_run`` and ``refresh_run`` for each of ``runs``, in one round trip
        for them all (a worker renews every run it holds at once): only what is still
        counted is extended."""


class ModelLoads(Protocol):
    """The bus's section for load per model: runs in flight, engine slots, drain."""

    async def admit_run(
        self, model: str, run_id: str, *, max_load: float | None, ttl: float, window: float
    ) -> LoadAdmission:
        """Count ``run_id`` in flight on ``model`` for ``ttl`` s if that keeps the model's
        load at or below ``max_load`` (always when None, or while no engine has said its
        slots), atomically; a run counted already is refreshed, whatever the load."""

    async def refresh_run(self, model: str, run_id: str, *, ttl: float) -> bool:
        """Count ``run_id`` in flight for ``ttl`` s from now if it is counted; False (and
        nothing counted) if it is not (released already, or lapsed)."""

    async def release_run(self, model: str, run_id: str, *, drained: bool) -> None:
        """The run is no longer in flight on ``model``; ``drained``: it ended (counted in
        the drain rate), else it was never made."""

    async def offer_capacity(self, model: str, source: str, slots: int, *, ttl: float) -> None:
        """``source`` (an engine, or a fleet) serves ``slots`` runs of ``model`` at once (its
        engine slots), for the next ``ttl`` s; a model's capacity is the sum over sources."""

    async def model_load(self, model: str, *, window: float) -> ModelLoad:
        """The model's load now; ``drained`` counts runs ended in the last ``window`` s."""


class TokenBudgets(Protocol):
    """The bus's section for per-user token budgets (token buckets)."""

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        """Take ``amount`` tokens if the balance covers it, else take nothing (an amount
        above the bucket's capacity is never granted: callers cap it)."""

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        """Replace a reservation by the actual count: refund ``reserved - used`` (up to the
        capacity), or debit the overrun (the balance may go negative)."""

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        """The balance now, refill included; changes nothing."""


class AttemptThrottles(Protocol):
    """The bus's section for attempt throttles (logins, sign-ups), by an opaque key."""

    async def attempt(self, key: str, backoff: Backoff, *, refuse: bool = True) -> Attempt:
        """Record an attempt at ``key`` if ``backoff`` lets one come now, atomically (a burst
        cannot all pass one check); one too early is refused, unrecorded — with ``refuse=False``
        recorded all the same, as made when it may go ahead (the caller holds it ``wait``)."""

    async def forget_attempts(self, key: str) -> None:
        """Drop ``key``'s record (after a success)."""

    async def attempts(self, key: str) -> int:
        """How many attempts ``key``'s live record holds (0: none); records nothing."""


class WriteMarks(Protocol):
    """The bus's section for recent writes per user (read-your-writes: store/routing.py)."""

    async def mark_write(self, user_id: str, *, ttl: float) -> None:
        """The user wrote: ``wrote_recently`` is True for at least ``ttl`` s from now."""

    async def wrote_recently(self, user_id: str) -> bool: ...


class RunInputs(Protocol):
    """The bus's section for inputs kept nowhere else: a temporary chat's conversation,
    which never reaches the database (the worker reads it here)."""

    async def keep_input(self, run_id: str, text: str, *, ttl: float) -> None:
        """Keep ``text`` as the run's input for ``ttl`` s (or until forgotten)."""

    async def run_input(self, run_id: str) -> str | None:
        """The run's input (None: never kept, forgotten, or lapsed)."""

    async def forget_input(self, run_id: str) -> None: ...


class Bus(
    RunQueue,
    RunStreams,
    CancelSignals,
    OpenStreams,
    UserRuns,
    ModelLoads,
    TokenBudgets,
    AttemptThrottles,
    WriteMarks,
    RunInputs,
    Protocol,
):
    """Everything processes tell each other about runs, section by section (a service that
    needs one section takes that section's protocol, so a test can fake it alone). All
    methods are coroutine-safe."""

    limits: BusLimits

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


_DIGITS = frozenset("0123456789")


def valid_entry_id(value: str) -> bool:
    """Entry ids look like Redis stream ids: ``<ms>-<seq>``, each part ASCII digits (not
    any Unicode digit ``str.isdigit`` takes, such as ``²``) and below 2**64."""
    ms, sep, seq = value.partition("-")
    return (
        bool(sep)
        and all(0 < len(part) <= 20 and _DIGITS.issuperset(part) for part in (ms, seq))
        and int(ms) < 2**64
        and int(seq) < 2**64
    )
