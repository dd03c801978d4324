"""The one door every run ends through, whatever the outcome.

Ending a run is five steps, in this order:

1. the stored state: the run and its assistant message reach their terminal state in one
   transaction, guarded by the state the caller saw (``Guard``), which also takes the run's
   budget reservation off its row;
2. the budget: that reservation is settled to the tokens the run used;
3. admission: the user's run slot comes back, and the run leaves its model's load;
4. the stream: an ``error`` event (if the outcome carries one), then ``done``;
5. the hooks: each listener hears of the ended run (metrics).

It is idempotent: a run that someone else already ended (the guard no longer holds) is left
alone, and ``finish`` answers None. Whoever's guarded update wins settles the reservation,
so it is settled exactly once. A crash between the commit and the settle loses that refund.

The worker (completed, cancelled, failed, rejected by output moderation), the sweeper (a
lost worker, a queue wait exceeded), cancel (a queued run) and input moderation (a refused
prompt, made and ended in one transaction: ``made_ended``) end runs here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.ext.asyncio import AsyncSession

from parley.bus.interface import Bus
from parley.domain import FinishReason, RunStatus
from parley.outages import OUTAGE_EXCEPTIONS, outage
from parley.qos.admission import Admission
from parley.qos.budget import Budget
from parley.runs.events import done_event, error_event
from parley.store import run_ends
from parley.store.database import Database
from parley.store.routing import Reads
from parley.store.run_ends import Outcome
from parley.store.schema import Run
from parley.text import storable

# storing a run's end through an outage: the first retry after this long, doubling to the cap
RETRY_FIRST_SECONDS = 0.1
RETRY_CAP_SECONDS = 5.0

log = logging.getLogger(__name__)

Make = Callable[[AsyncSession], Awaitable[Run]]
"""Makes a run in the transaction given (``Finisher.made_ended``)."""

EndListener = Callable[[Run], None]
"""Told of every run that ended here, after its ``done`` event (e.g. to count it)."""


@dataclass(frozen=True, slots=True)
class Guard:
    """What must still hold for the caller to end the run: the state it saw, and for a
    worker that it still holds the run, or for the sweeper that the lease has lapsed."""

    from_status: RunStatus
    worker_id: str | None = None
    lease_expired: bool = False


class Finisher:
    def __init__(
        self,
        db: Database,
        bus: Bus,
        budget: Budget,
        admission: Admission,
        listeners: Sequence[EndListener] = (),
        reads: Reads | None = None,
    ) -> None:
        self._db = db
        self._reads = reads
        self._bus = bus
        self._budget = budget
        self._admission = admission
        self._listeners = list(listeners)

    def listen(self, listener: EndListener) -> None:
        self._listeners.append(listener)

    async def finish_retrying(
        self, run_id: str, outcome: Outcome, guard: Guard, *, alone: bool = False
    ) -> Run | None:
        """``finish``, retried while the database (or the bus, for the budget's reservation
        read in the same step) cannot be reached (an outage, as ``outages.outage`` judges;
        any other error is raised at once): a worker that generated an answer through
        a database outage stores it once the database is back, with backoff up to
        ``RETRY_CAP_SECONDS`` between attempts, for as long as the worker lives.
        ``alone``: by ``finish_alone``."""
        delay = RETRY_FIRST_SECONDS
        while True:
            try:
                end = self.finish_alone if alone else self.finish
                return await end(run_id, outcome, guard)
            except OUTAGE_EXCEPTIONS as e:
                if outage(e) is None:  # a fault of the write itself: retrying cannot help
                    raise
                log.warning(
                    "run %s: storing its end failed (%r); retrying in %.1f s", run_id, e, delay
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_SECONDS)

    async def finish_or_fail(self, run_id: str, outcome: Outcome, guard: Guard) -> Run | None:
        """``finish``; but if the database refuses the outcome itself (not an outage: its
        text, say), the run ends failed without it rather than stay running for ever."""
        try:
            return await self.finish(run_id, outcome, guard)
        except OUTAGE_EXCEPTIONS as e:
            if outage(e) is not None:
                raise
            return await self._finish_unstorable(run_id, outcome, guard, e)

    async def _finish_unstorable(
        self, run_id: str, outcome: Outcome, guard: Guard, error: Exception
    ) -> Run | None:
        """The database refused the outcome itself (not an outage): the run still ends,
        failed, without the text it could not keep, rather than stay running for ever."""
        log.error("run %s: its end could not be stored (%r); ending it failed", run_id, error)
        failed = Outcome(
            status=RunStatus.FAILED,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            finish_reason=FinishReason.ERROR,
            error_code="internal_error",
            error_message="the answer could not be stored",
            cached_tokens=outcome.cached_tokens,
        )
        return await self.finish(run_id, failed, guard)

    async def finish(self, run_id: str, outcome: Outcome, guard: Guard) -> Run | None:
        """End the run with ``outcome`` if ``guard`` still holds; the ended run, or None if
        it was ended (or moved on) elsewhere."""
        async with self._db.transaction() as s:
            ended = await self._store(s, run_id, outcome, guard)
        return None if ended is None else await self._after(ended, outcome)

    async def finish_alone(self, run_id: str, outcome: Outcome, guard: Guard) -> Run | None:
        """``finish`` for a run with nothing but its own row to write (no assistant
        message, not a fold), held by a worker: one statement on its own."""
        assert not guard.lease_expired
        async with self._db.alone() as conn:
            ended = await run_ends.finish_alone(
                conn,
                run_id=run_id,
                outcome=_storable(outcome),
                from_status=guard.from_status,
                worker_id=guard.worker_id,
            )
        return None if ended is None else await self._after(ended, outcome)

    async def made_ended(self, make: Make, outcome: Outcome) -> Run:
        """A run made and ended in one transaction (a prompt the content policy refuses):
        never, not for a moment, queued where a sweeper could pick it up."""
        async with self._db.transaction() as s:
            made = await make(s)
            ended = await self._store(s, made.id, outcome, Guard(RunStatus.QUEUED))
        assert ended is not None  # nobody else knew of it
        return await self._after(ended, outcome)

    async def _store(
        self, s: AsyncSession, run_id: str, outcome: Outcome, guard: Guard
    ) -> run_ends.Finished | None:
        return await run_ends.finish(
            s,
            run_id=run_id,
            outcome=_storable(outcome),
            from_status=guard.from_status,
            worker_id=guard.worker_id,
            lease_expired=guard.lease_expired,
        )

    async def _after(self, ended: run_ends.Finished, outcome: Outcome) -> Run:
        """Steps 2 to 5, once the end is stored."""
        if self._reads is not None:  # the user's reads see the end before its `done`
            await self._reads.wrote(ended.run.user_id)
        try:
            await self._budget.settle_run(ended.run, ended.reserved_tokens)
        except OUTAGE_EXCEPTIONS as e:  # the run has ended all the same (stored above)
            log.warning("run %s: settling its budget failed, the bus is down: %r", ended.run.id, e)
        await self._let_go(ended.run)
        await self._announce(ended.run, outcome)
        self._tell(ended.run)
        return ended.run

    async def _announce(self, run: Run, outcome: Outcome) -> None:
        """The run's last events on its stream; with the bus down, a client that resumes
        reads the stored answer instead (``runs.relay``)."""
        try:
            if outcome.error_code is not None and outcome.error_message is not None:
                await self._bus.append(
                    run.id, error_event(outcome.error_code, outcome.error_message)
                )
            await self._bus.append(run.id, done_event(run))
        except OUTAGE_EXCEPTIONS as e:
            log.warning("run %s: its end not published, the bus is down: %r", run.id, e)

    async def _let_go(self, run: Run) -> None:
        """Never raises: the run has ended either way; a slot not given back lapses."""
        try:
            await self._admission.ended(run)
        except Exception:
            log.exception("giving back the run slot of run %s failed", run.id)

    def _tell(self, run: Run) -> None:
        for listener in self._listeners:
            try:
                listener(run)
            except Exception:
                log.exception("a run-end listener failed on run %s", run.id)


def _storable(outcome: Outcome) -> Outcome:
    """The outcome as every store keeps its text (``text.storable``)."""
    return replace(outcome, content=storable(outcome.content))
