"""How a run ends: its terminal state, its answer and its usage stored, and the budget
reservation it held taken, in one guarded step (``finish``; ``finish_alone`` for a run with
nothing but its row to write). Whoever's guarded UPDATE wins ends the run; every other
caller is told None.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from sqlalchemy import Table, Update, bindparam, case, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from parley.domain import FinishReason, MessageStatus, RunSource, RunStatus, utcnow
from parley.store import summaries
from parley.store.parts import MessageParts
from parley.store.schema import Message, Run

_RUNS = cast(Table, Run.__table__)


@dataclass(frozen=True, slots=True)
class Finished:
    """A run that just reached its terminal state, and the budget reservation it gave up
    (to be settled by the caller, once, after the commit; None if it held none)."""

    run: Run
    reserved_tokens: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a run ends: built by keywords, as every field of it is easily mistaken for the
    next."""

    status: RunStatus
    content: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    finish_reason: FinishReason | None = None
    error_code: str | None = None
    error_message: str | None = None
    cached_tokens: int | None = None  # of the prompt, found in the engine's prefix cache
    parts: MessageParts = field(default_factory=MessageParts)  # reasoning, tool calls


_MESSAGE_STATUS = {
    RunStatus.COMPLETED: MessageStatus.COMPLETED,
    RunStatus.CANCELLED: MessageStatus.CANCELLED,
    RunStatus.FAILED: MessageStatus.FAILED,
    RunStatus.REJECTED: MessageStatus.REJECTED,
}


async def finish(
    s: AsyncSession,
    *,
    run_id: str,
    outcome: Outcome,
    from_status: RunStatus,
    worker_id: str | None = None,
    lease_expired: bool = False,
) -> Finished | None:
    """Move a run from ``from_status`` to its terminal state with its message, and take its
    budget reservation, in the caller's transaction; None if someone else moved it.

    ``worker_id``: only if that worker still holds it; ``lease_expired``: only if its lease
    has lapsed (the sweeper's guard against a worker that just renewed).
    """
    assert outcome.status.is_terminal
    now = utcnow()
    # the reservation as it stands, the row locked (Postgres) until this transaction ends;
    # the guarded UPDATE then clears it, so whoever's update wins takes it, once
    reserved = await s.scalar(_RESERVED, {"p_id": run_id})
    params = _bound(run_id, from_status, worker_id, outcome, now)
    await s.flush()  # (a run made in this transaction is written before the Core UPDATE)
    row = (await s.execute(_finishing(worker_id is not None, lease_expired), params)).first()
    if row is None:
        return None
    run = Run(**row._mapping)  # detached: the ORM's copy in ``s``, if any, is left as it was
    await _store_message(s, run, outcome, now)
    if run.source is RunSource.SUMMARY:  # a fold without a summary lets go (else: landing)
        await summaries.ended(s, run, outcome.content)
    return Finished(run, reserved)


def ends_alone(run: Run) -> bool:
    """Whether ``run`` has nothing but its own row to write at its end (no assistant
    message, not a fold): ``finish_alone`` can end it."""
    return run.assistant_message_id is None and run.source is not RunSource.SUMMARY


async def finish_alone(
    conn: AsyncConnection,
    *,
    run_id: str,
    outcome: Outcome,
    from_status: RunStatus,
    worker_id: str | None = None,
) -> Finished | None:
    """``finish`` for a run that has nothing but its own row to write (no assistant
    message, not a fold), on a connection of ``Database.alone``: on Postgres one statement
    (the row locked, its reservation read, its end stored, the reservation cleared), so no
    transaction's round trips; on SQLite ``finish``'s two statements in ``alone``'s
    transaction."""
    now = utcnow()
    params = _bound(run_id, from_status, worker_id, outcome, now)
    by_worker = worker_id is not None
    if conn.dialect.name == "postgresql":
        row = (await conn.execute(_finishing_held(by_worker), params)).first()
        reserved = None if row is None else row.held_tokens
    else:
        reserved = await conn.scalar(_RESERVED, {"p_id": run_id})
        row = (await conn.execute(_finishing(by_worker, False), params)).first()
    if row is None:
        return None
    run = Run(**{col.key: row._mapping[col.key] for col in _RUNS.c})
    assert ends_alone(run)
    return Finished(run, reserved)


@functools.cache
def _finishing_held(by_worker: bool) -> Update:
    """``_finishing`` from the row locked first (``FOR UPDATE`` in a sub-select), which
    also returns the reservation it held (``held_tokens``): Postgres only (SQLite's
    RETURNING cannot name another table)."""
    c = _RUNS.c
    held = (
        select(c.id, c.reserved_tokens.label("held_tokens"))
        .where(c.id == bindparam("p_id"))
        .with_for_update()
        .subquery("held")
    )
    ending = _finishing(by_worker, False)
    return ending.where(c.id == held.c.id).returning(held.c.held_tokens)


# the hot path's statements, built once (building and keying them cost more than SQLite's
# own work); what varies is bound at each execution
_RESERVED = select(Run.reserved_tokens).where(Run.id == bindparam("p_id")).with_for_update()


@functools.cache
def _finishing(by_worker: bool, lease_expired: bool) -> Update:
    """The guarded UPDATE to a terminal state: from ``p_from``; held by ``p_worker``
    (``by_worker``); with its lease lapsed before ``p_now`` (``lease_expired``)."""
    c = _RUNS.c
    conditions = [c.id == bindparam("p_id"), c.status == bindparam("p_from", type_=c.status.type)]
    if by_worker:
        conditions.append(c.worker_id == bindparam("p_worker"))
    if lease_expired:
        conditions.append(c.lease_expires_at < bindparam("p_now", type_=c.lease_expires_at.type))
    kept = bindparam("p_content", type_=c.output.type)
    return (
        update(_RUNS)
        .where(*conditions)
        .values(
            reserved_tokens=None,
            output=case((c.assistant_message_id.is_(None), kept), else_=None),
            lease_expires_at=None,
            **{name: bindparam(f"p_{name}", type_=c[name].type) for name in _ENDED_COLUMNS},
        )
        .returning(*c)
    )


_ENDED_COLUMNS = (
    "status",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "error_code",
    "error_message",
    "finished_at",
    "cached_tokens",
)


async def _store_message(s: AsyncSession, run: Run, outcome: Outcome, now: datetime) -> None:
    """The answer goes to the run's assistant message (the run row kept it when it has
    none: ``_ended``)."""
    if run.assistant_message_id is None:
        return
    await s.execute(
        update(Message)
        .where(Message.id == run.assistant_message_id)
        .values(
            content=outcome.content,
            parts=outcome.parts.to_json(),
            status=_MESSAGE_STATUS[outcome.status],
            token_count=outcome.completion_tokens,
            updated_at=now,
        )
    )


def _bound(
    run_id: str, from_status: RunStatus, worker_id: str | None, outcome: Outcome, now: datetime
) -> dict[str, object]:
    """Everything ``_finishing`` (and ``_finishing_held``) binds."""
    params = {"p_id": run_id, "p_from": from_status, "p_worker": worker_id, "p_now": now}
    return {**params, **_ended(outcome, now)}


def _ended(outcome: Outcome, now: datetime) -> dict[str, object]:
    """The bound values of ``_finishing``: the run's columns once it ended with
    ``outcome``; its answer (``p_content``) kept on the row when it has no assistant
    message to hold it."""
    return {
        "p_content": outcome.content,
        "p_status": outcome.status,
        "p_prompt_tokens": outcome.prompt_tokens,
        "p_completion_tokens": outcome.completion_tokens,
        "p_finish_reason": outcome.finish_reason,
        "p_error_code": outcome.error_code,
        "p_error_message": outcome.error_message,
        "p_finished_at": now,
        "p_cached_tokens": outcome.cached_tokens,
    }
