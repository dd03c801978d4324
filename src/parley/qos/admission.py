"""Admission on the bus alone: per-user concurrency and load shedding by tier.

Decided before anything touches the database, so a refusal is fast:

1. **Per-user concurrency.** Each run in flight (queued or running) holds one of its user's
   ``max_concurrent_runs`` run slots on the bus, taken atomically (exact across api
   processes), or the send is refused: 429 ``too_many_runs``. A slot is named by the
   request's idempotency key and body when it has a key (so a retry shares its first run's
   slot), else by the run's id. Slots carry an expiry: a queued run's lasts its tier's queue
   wait; a running run's one lease, refreshed with the lease, so a lost worker's slots come
   back within a lease. Whoever ends a run (the ``Finisher``) gives its slot back.
2. **Load shedding.** A model's load is (queued + running) ÷ its engines' slots, counted on
   the bus. A tier with ``max_load`` has its new runs refused (503 ``server_overloaded``)
   when one more would push the load above it: or, where the tier has a
   ``downgrade_model`` with room under the same limit, served by that model instead. A tier
   without ``max_load`` (the top one) is refused only when the queue is full. The refusal's
   Retry-After is when the observed drain rate would bring the load back under the limit.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from parley.bus.interface import Bus, HeldRun, ModelLoad, QueueFull
from parley.domain import RunSource
from parley.errors import Overloaded, TooManyRuns
from parley.observability.metrics import Metrics
from parley.qos.settings import QosSettings
from parley.runs.settings import RunSettings
from parley.store.new_runs import NewRun
from parley.store.schema import Run
from parley.tiers import TierSettings

_NO_LIMIT = 1 << 30  # a slot re-held for a run already in flight is never refused


def user_run_key(run_id: str, idempotency_key: str | None, request_hash: str | None) -> str:
    """The name of the run slot a run holds: its request's idempotency key and body (the
    same request sent again shares it; the key reused for another request does not), else
    its id."""
    if idempotency_key is None:
        return run_id
    return f"key:{request_hash}:{idempotency_key}"


Serves = Callable[[str], bool]
"""Whether a model's engine can serve the run (its tools, format, sampling)."""


class Admission:
    def __init__(
        self, bus: Bus, qos: QosSettings, runs: RunSettings, *, metrics: Metrics | None = None
    ) -> None:
        self._bus = bus
        self._settings = qos
        self._runs = runs
        self._metrics = metrics

    def _queued_ttl(self, tier: TierSettings) -> float:
        """How long a queued run's slot lasts unrefreshed: past its queue wait limit the
        sweeper ends it (and gives the slot back), or a worker has claimed it."""
        r = self._runs
        return tier.max_queue_wait_seconds + 2 * (r.lease_seconds + r.sweep_interval_seconds)

    async def admit(self, new: NewRun, serves: Serves | None = None) -> NewRun:
        """Take the run's slot and count it on its model (or a downgrade model that
        ``serves`` it: one whose engine honours every parameter the run asks for); the run
        to make, downgraded or not. Raises TooManyRuns or Overloaded, having taken nothing.
        The slot comes first: a user refused for their own runs never counts (even for a
        moment) in the load that decides for everyone else."""
        tier = self._settings.tier(new.tier)
        slot = user_run_key(new.run_id, new.idempotency_key, new.request_hash)
        ttl = self._queued_ttl(tier)
        if not await self._bus.hold_user_run(
            new.user_id, slot, limit=tier.max_concurrent_runs, ttl=ttl
        ):
            raise self._too_many(new.tier, tier)
        try:
            window = self._settings.load_window_seconds
            asked = await self._bus.admit_run(
                new.model, new.run_id, max_load=tier.max_load, ttl=ttl, window=window
            )
            if asked.admitted:
                return new
            return await self._downgrade(new, tier, asked.load, ttl, serves)
        except BaseException:
            await self._bus.release_user_run(new.user_id, slot)
            raise

    async def _downgrade(
        self, new: NewRun, tier: TierSettings, load: ModelLoad, ttl: float, serves: Serves | None
    ) -> NewRun:
        """The run on its tier's downgrade model if that has room (and can serve it), else
        Overloaded."""
        down = tier.downgrade_model
        able = down is not None and (serves is None or serves(down))
        if down is not None and down != new.model and able:
            window = self._settings.load_window_seconds
            other = await self._bus.admit_run(
                down, new.run_id, max_load=tier.max_load, ttl=ttl, window=window
            )
            if other.admitted:
                if self._metrics is not None:
                    self._metrics.run_downgraded(new.tier, new.model, down)
                return replace(new, model=down, downgraded_from=new.model)
        assert tier.max_load is not None  # a tier without a limit is always admitted
        raise self._overloaded(new, tier, tier.max_load, load)

    async def undo(self, new: NewRun, *, keep_user_run: bool = False) -> None:
        """The run admitted was not made: uncount it; give its slot back unless another run
        holds it (a same-key request's)."""
        await self._bus.release_run(new.model, new.run_id, drained=False)
        if not keep_user_run:
            await self._bus.release_user_run(
                new.user_id, user_run_key(new.run_id, new.idempotency_key, new.request_hash)
            )

    async def still_running(self, runs: Sequence[Run]) -> None:
        """Workers run ``runs`` now: each one's slot and count last one lease from now, one
        call to the bus for them all (at a run's start, and at every lease renewal for all
        a worker holds). Only refreshed: a run that ended meanwhile (its slot given back)
        does not take it again."""
        held = [
            HeldRun(run.user_id, _user_run_key(run), run.model, run.id)
            for run in runs
            if not _background(run)
        ]
        await self._bus.refresh_held(held, ttl=self._runs.lease_seconds)

    async def requeued(self, run: Run) -> None:
        """A run put back on the queue (its worker was lost) holds its slot and count again,
        whatever the limits: it was admitted once."""
        if _background(run):
            return
        ttl = self._queued_ttl(self._settings.tier(run.tier))
        await self._bus.hold_user_run(run.user_id, _user_run_key(run), limit=_NO_LIMIT, ttl=ttl)
        await self._bus.admit_run(run.model, run.id, max_load=None, ttl=ttl, window=0)

    async def ended(self, run: Run) -> None:
        """The run ended, however it ended: its slot back, and it counts in the drain."""
        if _background(run):
            return
        await asyncio.gather(
            self._bus.release_run(run.model, run.id, drained=True),
            self._bus.release_user_run(run.user_id, _user_run_key(run)),
        )

    async def queue_full(self, new: NewRun, queued: int) -> QueueFull:
        """The refusal of a run that finds the queue full: Retry-After from the drain rate
        of its model (how long until the queue has room for one more)."""
        tier = self._settings.tier(new.tier)
        load = await self._bus.model_load(new.model, window=self._settings.load_window_seconds)
        excess = queued + 1 - self._settings.queue_max
        wait = min(
            drain_wait(excess, load, fallback=tier.backoff.delay(1)), tier.backoff.max_seconds
        )
        return QueueFull(
            f"the service is busy: the run queue is full; try again in {math.ceil(wait)} s",
            retry_after=wait,
        )

    def _too_many(self, tier_name: str, tier: TierSettings) -> TooManyRuns:
        n = tier.max_concurrent_runs
        return TooManyRuns(
            f"you have {n} run{'s' if n != 1 else ''} queued or running, as many as the "
            f"{tier_name} tier allows at once; send again when one ends",
            retry_after=tier.backoff.delay(1),
        )

    def _overloaded(
        self, new: NewRun, tier: TierSettings, max_load: float, load: ModelLoad
    ) -> Overloaded:
        wait = retry_after(load, max_load, fallback=tier.backoff.delay(1))
        wait = min(wait, tier.backoff.max_seconds)
        return Overloaded(
            f"the service is busy: model {new.model!r} is at {load.load:.0%} of its capacity, "
            f"above what the {new.tier} tier is served at ({max_load:.0%}); try again in "
            f"{math.ceil(wait)} s",
            retry_after=wait,
        )


def retry_after(load: ModelLoad, max_load: float, *, fallback: float) -> float:
    """Seconds until the drain rate seen lately brings the load down to where one more run
    fits under ``max_load``; ``fallback`` when nothing drained lately (at least 1 s)."""
    return drain_wait(
        load.in_flight + 1 - math.floor(max_load * load.slots), load, fallback=fallback
    )


def drain_wait(excess: int, load: ModelLoad, *, fallback: float) -> float:
    """Seconds until ``excess`` runs have ended at the drain rate seen lately; ``fallback``
    when nothing drained lately (at least 1 s either way)."""
    if load.drain_rate <= 0:
        return max(1.0, fallback)
    return max(1.0, excess / load.drain_rate)


def _background(run: Run) -> bool:
    """A background run (a chat's summary) holds no user's slot and no model's load."""
    return run.source is RunSource.SUMMARY


def _user_run_key(run: Run) -> str:
    return user_run_key(run.id, run.idempotency_key, run.request_hash)
