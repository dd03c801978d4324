"""Stopping a run: a queued run ends at once (its budget reservation is given back, as it
used nothing); a running one is signalled to its worker, which settles it."""

from __future__ import annotations

from parley.accounts.service import Principal
from parley.bus.interface import Bus
from parley.domain import RunStatus
from parley.qos.budget import Budget
from parley.runs.events import done_event
from parley.store import runs
from parley.store.database import Database
from parley.store.schema import Run


async def cancel(
    db: Database, bus: Bus, budget: Budget, who: Principal, chat_id: str, run_id: str
) -> Run:
    """Stop the run; returns it (terminal at once if it was queued or had ended)."""
    async with db.transaction() as s:
        run = await runs.get_run(s, user_id=who.user_id, run_id=run_id)
    if run.chat_id != chat_id:
        raise runs.run_not_found(run_id)
    if run.status.is_terminal:
        return run
    await bus.request_cancel(run_id)  # a worker that claims it later sees this too
    if run.status is RunStatus.QUEUED:
        async with db.transaction() as s:
            ended = await runs.finish(
                s,
                run_id=run_id,
                outcome=runs.Outcome(RunStatus.CANCELLED, "", None, 0, "cancelled"),
                from_status=RunStatus.QUEUED,
            )
        if ended is not None:
            await bus.remove(run_id)
            await budget.settle_run(ended.run, ended.reserved_tokens)
            await bus.append(run_id, done_event(ended.run))
            return ended.run
    async with db.transaction() as s:
        return await runs.get_run(s, user_id=who.user_id, run_id=run_id)
