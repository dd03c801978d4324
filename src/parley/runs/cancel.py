"""Stopping a run: a queued run ends at once (its budget reservation is given back, as it
used nothing); a running one is signalled to its worker, which ends it."""

from __future__ import annotations

from parley.accounts.principal import Principal
from parley.bus.interface import Bus
from parley.domain import FinishReason, RunStatus
from parley.runs.finisher import Finisher, Guard
from parley.store import run_ends, run_records
from parley.store.database import Database
from parley.store.schema import Run

_CANCELLED = run_ends.Outcome(status=RunStatus.CANCELLED, finish_reason=FinishReason.CANCELLED)


async def cancel(
    db: Database,
    bus: Bus,
    finisher: Finisher,
    who: Principal,
    chat_id: str | None,
    run_id: str,
) -> Run:
    """Stop the run (of that chat, when ``chat_id`` is given); returns it (terminal at once
    if it was queued or had ended)."""
    async with db.transaction() as s:
        run = await run_records.get_run(s, user_id=who.user_id, run_id=run_id)
    if chat_id is not None and run.chat_id != chat_id:
        raise run_records.run_not_found(run_id)
    if run.status.is_terminal:
        return run
    await bus.request_cancel(run_id)  # a worker that claims it later sees this too
    if run.status is RunStatus.QUEUED:
        ended = await finisher.finish(run_id, _CANCELLED, Guard(RunStatus.QUEUED))
        if ended is not None:
            await bus.remove(run_id)
            return ended
    async with db.transaction() as s:
        return await run_records.get_run(s, user_id=who.user_id, run_id=run_id)
