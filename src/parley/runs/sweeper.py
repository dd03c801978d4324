"""Recovering runs whose worker vanished, and re-queueing runs the queue lost.

Runs in every process (api and worker): each step is a conditional update, so
sweepers racing each other, or a worker, change a run at most once.

- A running run whose lease lapsed (once this sweeper has reached the database for a whole
  lease since it last failed to: a database outage stops renewals, not workers): its
  attempt is fenced out of the stream (the bus refuses that attempt's appends from then
  on), then it is re-queued if nothing of its answer was streamed yet — no text, reasoning,
  call or tool result — (up to ``max_run_attempts``; it holds its user's run slot again),
  otherwise ``failed`` with its partial text (a call is never made twice).
- A queued run older than ``requeue_stale_after_seconds``: put on the queue again
  (a no-op if it is there), which covers an in-process queue lost in a restart.
- A queued run sent longer ago than its tier's ``max_queue_wait_seconds`` (counted from
  when it was sent: what its client has waited, a re-queue after a lost worker included)
  ends ``rejected`` with ``queue_wait_exceeded``, its reservation given back, and leaves the
  queue: nothing waits for ever.
- Idempotency keys older than their lifetime are released.

A run failed here ends through the ``Finisher``, as the worker's runs do (its reservation is
settled to the tokens it used); a re-queued run keeps its reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from datetime import datetime, timedelta

from parley.bus.interface import Bus, EventKind, QueuedRun, QueueFull
from parley.domain import QUEUE_WAIT_EXCEEDED, FinishReason, RunStatus, utcnow
from parley.outages import log_failure
from parley.qos.admission import Admission
from parley.runs.events import DeltaEvent, decode, status_event
from parley.runs.finisher import Finisher, Guard
from parley.runs.settings import RunSettings
from parley.store import run_ends, run_records
from parley.store.database import Database
from parley.store.schema import Run
from parley.tiers import TierSettings

log = logging.getLogger(__name__)

# what a run's answer is made of: once any is streamed, the run is not run again
OUTPUT = frozenset(
    {EventKind.DELTA, EventKind.REASONING, EventKind.TOOL_CALL, EventKind.TOOL_RESULT}
)


class Sweeper:
    def __init__(
        self,
        db: Database,
        bus: Bus,
        finisher: Finisher,
        admission: Admission,
        settings: RunSettings,
        *,
        tiers: dict[str, TierSettings],
        stream_maxlen: int,
    ) -> None:
        self._admission = admission
        self._db = db
        self._bus = bus
        self._finisher = finisher
        self._settings = settings
        self._tiers = tiers
        self._stream_maxlen = stream_maxlen
        # since when this sweeper has reached the database without a failure (monotonic);
        # from the start as if always: only an outage seen here makes it wait
        self._reachable_since = -math.inf

    async def run_forever(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._reachable_since = math.inf  # until the next sweep that succeeds
                log_failure(log, e, "sweep failed; trying again")
            await asyncio.sleep(self._settings.sweep_interval_seconds)

    async def sweep_once(self) -> None:
        now = utcnow()
        async with self._db.transaction() as s:
            expired = await run_records.expired_leases(s, now=now)
        self._reachable_since = min(self._reachable_since, time.monotonic())
        if self._leases_judged():
            for run in expired:
                await self._recover(run)
        stale_before = now - timedelta(seconds=self._settings.requeue_stale_after_seconds)
        async with self._db.transaction() as s:
            stale = await run_records.stale_queued(s, older_than=stale_before)
        for run in stale:
            try:
                await self._bus.enqueue(QueuedRun(run.id, run.priority))
            except QueueFull:
                break
        await self._reject_overdue(now)
        forget_before = now - timedelta(seconds=self._settings.idempotency_ttl_seconds)
        async with self._db.transaction() as s:
            await run_records.forget_idempotency_keys(s, before=forget_before)

    async def _reject_overdue(self, now: datetime) -> None:
        for name, tier in self._tiers.items():
            limit = tier.max_queue_wait_seconds
            async with self._db.transaction() as s:
                overdue = await run_records.overdue_queued(
                    s, tier=name, sent_before=now - timedelta(seconds=limit)
                )
            for run in overdue:
                outcome = run_ends.Outcome(
                    status=RunStatus.REJECTED,
                    error_code=QUEUE_WAIT_EXCEEDED,
                    error_message=f"the service is busy: the run waited over {limit:g} s in "
                    f"the queue ({name} tier) and was not started; send it again later",
                )
                if await self._finisher.finish(run.id, outcome, Guard(RunStatus.QUEUED)):
                    await self._bus.remove(run.id)
                    log.warning("run %s queued over %g s (%s tier): rejected", run.id, limit, name)

    def _leases_judged(self) -> bool:
        """Whether lapsed leases mean lost workers: not until the database has been
        reachable for a whole lease since an outage, so that workers that could not renew
        through it (they were generating all along) renew first, and finish their runs."""
        return time.monotonic() - self._reachable_since >= self._settings.lease_seconds

    async def _recover(self, run: Run) -> None:
        # fence the lost attempt out first: from here on its worker, should it wake, can no
        # longer append, so what the stream holds is what the decision below is made on
        await self._bus.raise_fence(run.id, run.attempts + 1)
        partial = await self._streamed_text(run.id)
        if partial is None and run.attempts < self._settings.max_run_attempts:
            async with self._db.transaction() as s:
                requeued = await run_records.requeue(s, run_id=run.id)
            if requeued is not None:
                log.warning("run %s lost its worker before streaming: re-queued", run.id)
                await self._admission.requeued(requeued)
                await self._bus.append(run.id, status_event(run.id, RunStatus.QUEUED))
                with contextlib.suppress(QueueFull):  # else the stale-queued pass retries
                    await self._bus.enqueue(QueuedRun(run.id, run.priority))
            return
        text, tokens = partial or ("", 0)
        outcome = run_ends.Outcome(
            status=RunStatus.FAILED,
            content=text,
            prompt_tokens=run.prompt_tokens,
            completion_tokens=tokens,
            finish_reason=FinishReason.ERROR,
            error_code="worker_lost",
            error_message="the worker running this run stopped responding",
        )
        guard = Guard(RunStatus.RUNNING, lease_expired=True)
        if await self._finisher.finish_or_fail(run.id, outcome, guard) is not None:
            log.warning("run %s lost its worker mid-stream: failed, partial text kept", run.id)

    async def _streamed_text(self, run_id: str) -> tuple[str, int] | None:
        """The text streamed so far and the tokens of all the output; None if no output
        was streamed at all (no text, reasoning, call or tool result: a run that made a call
        is never run again, so that no call is made twice)."""
        entries = await self._bus.read(run_id, None, timeout=0, count=self._stream_maxlen)
        events = [decode(e.event) for e in entries if e.event.kind in OUTPUT]
        if not events:
            return None
        text = "".join(e.text for e in events if isinstance(e, DeltaEvent))
        return text, sum(getattr(e, "tokens", 0) for e in events)
