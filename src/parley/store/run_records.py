"""Queries on runs: find, claim with a lease, renew, recover (how one ends: ``run_ends``).

State changes are conditional UPDATEs (``WHERE status = …``), so the api, the
workers and the sweepers can race on a run and exactly one of them wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from parley.domain import (
    RunStatus,
    in_prompt,
    is_id,
    utcnow,
)
from parley.errors import NotFound, no_such
from parley.store.schema import Message, Run

HISTORY_LIMIT = 200


def run_not_found(run_id: str) -> NotFound:
    return no_such("run", run_id, code="run_not_found", param="run_id")


async def get_run(s: AsyncSession, *, user_id: str, run_id: str) -> Run:
    if not is_id("run", run_id):
        raise run_not_found(run_id)
    run = await s.scalar(select(Run).where(Run.user_id == user_id, Run.id == run_id))
    if run is None:
        raise run_not_found(run_id)
    return run


async def errors_of(
    s: AsyncSession, *, user_id: str, run_ids: list[str]
) -> dict[str, tuple[str, str]]:
    """The (code, message) of each of these runs that ended with an error."""
    if not run_ids:
        return {}
    rows = await s.execute(
        select(Run.id, Run.error_code, Run.error_message).where(
            Run.user_id == user_id, Run.id.in_(run_ids), Run.error_code.is_not(None)
        )
    )
    return {run_id: (code or "", message or "") for run_id, code, message in rows}


async def cut_at_limit(s: AsyncSession, *, user_id: str, run_ids: list[str]) -> set[str]:
    """Which of these runs ended at their token limit (finish reason ``length``)."""
    if not run_ids:
        return set()
    rows = await s.scalars(
        select(Run.id).where(
            Run.user_id == user_id, Run.id.in_(run_ids), Run.finish_reason == "length"
        )
    )
    return set(rows)


async def find_by_idempotency_key(
    s: AsyncSession, *, user_id: str, key: str, since: datetime
) -> Run | None:
    return await s.scalar(
        select(Run).where(
            Run.user_id == user_id, Run.idempotency_key == key, Run.created_at >= since
        )
    )


async def forget_idempotency_keys(s: AsyncSession, *, before: datetime) -> int:
    result = await s.execute(
        update(Run)
        .where(Run.idempotency_key.is_not(None), Run.created_at < before)
        .values(idempotency_key=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def delete_run(s: AsyncSession, run: Run) -> None:
    """Undo a run that never reached the queue: the run and both of its messages."""
    await s.delete(run)
    await s.flush()
    for message_id in (run.assistant_message_id, run.user_message_id):
        message = await s.get(Message, message_id) if message_id else None
        if message is not None:
            await s.delete(message)


async def take_reservation(s: AsyncSession, *, run_id: str) -> int | None:
    """The budget reservation the run still holds, cleared in the caller's transaction:
    whoever commits this first gets the amount, every later caller gets None."""
    held = await s.scalar(select(Run.reserved_tokens).where(Run.id == run_id).with_for_update())
    if held is None:
        return None
    result = await s.execute(
        update(Run)
        .where(Run.id == run_id, Run.reserved_tokens.is_not(None))
        .values(reserved_tokens=None)
    )
    return held if getattr(result, "rowcount", 0) else None


async def claim(
    conn: AsyncSession | AsyncConnection, *, run_id: str, worker_id: str, lease: timedelta
) -> Run | None:
    """queued → running under this worker's lease; None if someone else has it or it ended.
    One statement, the conditional UPDATE returning the claimed row, built once and run
    without the ORM (``Database.alone``); the run comes back detached."""
    now = utcnow()
    params = {"p_id": run_id, "p_worker": worker_id, "p_lease": now + lease, "p_now": now}
    row = (await conn.execute(_CLAIM, params)).first()
    return None if row is None else Run(**row._mapping)


_RUNS = cast(Table, Run.__table__)
_CLAIM = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("p_id"), _RUNS.c.status == RunStatus.QUEUED)
    .values(
        status=RunStatus.RUNNING,
        worker_id=bindparam("p_worker"),
        lease_expires_at=bindparam("p_lease", type_=_RUNS.c.lease_expires_at.type),
        started_at=bindparam("p_now", type_=_RUNS.c.started_at.type),
        attempts=_RUNS.c.attempts + 1,
    )
    .returning(*_RUNS.c)
)


async def set_prompt_tokens(
    s: AsyncSession, run: Run, prompt_tokens: int, parts: str | None = None
) -> None:
    """The prompt's length as the engine counts it, known once the run is claimed, and what
    went into it (``parts``, JSON); stored only while it runs (its end stores the count it
    ended with)."""
    await s.execute(
        update(Run)
        .where(Run.id == run.id, Run.status == RunStatus.RUNNING)
        .values(prompt_tokens=prompt_tokens, prompt_parts=parts)
    )
    run.prompt_tokens = prompt_tokens
    run.prompt_parts = parts


async def release_lease(s: AsyncSession, *, run_id: str, worker_id: str) -> bool:
    """A worker lets go of a running run: its lease lapses now, and no renewal of that
    worker's extends it again; the sweeper recovers it. False if the worker did not hold it."""
    result = await s.execute(
        update(Run)
        .where(Run.id == run_id, Run.worker_id == worker_id, Run.status == RunStatus.RUNNING)
        .values(worker_id=None, lease_expires_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


async def renew_leases(s: AsyncSession, *, worker_id: str, lease: timedelta) -> set[str]:
    """Extend every lease this worker holds, in one statement; the ids still held."""
    result = await s.execute(
        update(Run)
        .where(Run.worker_id == worker_id, Run.status == RunStatus.RUNNING)
        .values(lease_expires_at=utcnow() + lease)
        .returning(Run.id)
    )
    return set(result.scalars())


async def history(s: AsyncSession, run: Run) -> list[Message]:
    """The run's user message and the messages above it on its branch, oldest first."""
    if run.user_message_id is None:
        return []
    user_msg = await s.get(Message, run.user_message_id)
    if user_msg is None:
        return []
    rows = await s.scalars(  # the user message's branch (``branches.py``), root first
        select(Message).where(Message.user_id == run.user_id, Message.chat_id == run.chat_id)
    )
    by_id = {m.id: m for m in rows}
    path: list[Message] = []
    at: Message | None = user_msg
    while at is not None and len(path) < HISTORY_LIMIT and at not in path:
        path.append(at)
        at = by_id.get(at.parent_id) if at.parent_id is not None else None
    return [m for m in path if in_prompt(m.role, m.status, m.content)][::-1]


async def requeue(s: AsyncSession, *, run_id: str) -> Run | None:
    """An expired running run goes back to queued (nothing was streamed yet)."""
    result = await s.execute(
        update(Run)
        .where(Run.id == run_id, Run.status == RunStatus.RUNNING, Run.lease_expires_at < utcnow())
        .values(status=RunStatus.QUEUED, worker_id=None, lease_expires_at=None, started_at=None)
    )
    if not getattr(result, "rowcount", 0):
        return None
    return await s.get(Run, run_id)


async def expired_leases(s: AsyncSession, *, now: datetime, limit: int = 100) -> list[Run]:
    return list(
        await s.scalars(
            select(Run)
            .where(Run.status == RunStatus.RUNNING, Run.lease_expires_at < now)
            .limit(limit)
        )
    )


async def overdue_queued(
    s: AsyncSession, *, tier: str, sent_before: datetime, limit: int = 500
) -> list[Run]:
    """The tier's runs still queued that were sent before ``sent_before``, oldest first."""
    return list(
        await s.scalars(
            select(Run)
            .where(Run.status == RunStatus.QUEUED, Run.tier == tier, Run.created_at < sent_before)
            .order_by(Run.created_at)
            .limit(limit)
        )
    )


async def stale_queued(s: AsyncSession, *, older_than: datetime, limit: int = 500) -> list[Run]:
    return list(
        await s.scalars(
            select(Run)
            .where(Run.status == RunStatus.QUEUED, Run.created_at < older_than)
            .order_by(Run.created_at)
            .limit(limit)
        )
    )


async def answer(s: AsyncSession, run: Run) -> str:
    """The run's answer as stored: its assistant message's content, or its own output."""
    if run.assistant_message_id is None:
        return run.output or ""
    message = await s.get(Message, run.assistant_message_id)
    return message.content if message else ""
