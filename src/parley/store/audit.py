"""Queries on the audit log: appending a record to the chain (in the caller's transaction,
so a change and its record commit together or not at all), reading it back in order, and
pruning records older than the retention (the head keeps the last pruned hash).

Appending takes the head row first (``UPDATE … RETURNING``): Postgres locks the row until
the transaction ends and SQLite takes its write lock, so concurrent appends line up and
each one chains from the one before it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime

from sqlalchemy import Index, Integer, String, Text, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.audit.actions import AuditEvent
from parley.audit.chain import GENESIS, Chain, Entry
from parley.domain import utcnow
from parley.store.schema import Base


class AuditRecord(Base):
    """One security or admin event (``audit/``): appended, never changed; each chained to
    the one before by its hash (``audit/chain.py``)."""

    __tablename__ = "audit_records"
    __table_args__ = (
        Index("ix_audit_records_actor", "actor_id", "seq"),
        Index("ix_audit_records_target", "target_id", "seq"),
        Index("ix_audit_records_at", "at"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[datetime]
    action: Mapped[str] = mapped_column(String(60))
    actor_id: Mapped[str | None] = mapped_column(String(40))
    actor: Mapped[str] = mapped_column(String(320))
    target_type: Mapped[str | None] = mapped_column(String(40))
    target_id: Mapped[str | None] = mapped_column(String(80))
    detail: Mapped[str] = mapped_column(Text)  # JSON
    address: Mapped[str | None] = mapped_column(String(100))
    user_agent: Mapped[str | None] = mapped_column(String(300))
    request_id: Mapped[str | None] = mapped_column(String(64))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditHead(Base):
    """The audit log's one head row: the last seq and hash (appends take it in turn), and
    the anchor the chain starts from once old records are pruned."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(64))
    anchor_seq: Mapped[int] = mapped_column(Integer)
    anchor_hash: Mapped[str] = mapped_column(String(64))


HEAD_ID = 1
READ_BATCH = 1000


async def append(s: AsyncSession, event: AuditEvent, chain: Chain) -> AuditRecord:
    row = await _take_head(s)
    seq, previous = row
    entry = Entry(
        seq=seq,
        at=utcnow(),
        action=event.action.value,
        actor_id=event.actor.id,
        actor=event.actor.name[:320],
        target_type=event.target_type,
        target_id=event.target_id,
        detail=event.detail,
        address=event.where.address,
        user_agent=(event.where.user_agent or None) and event.where.user_agent[:300],
        request_id=event.where.request_id,
    )
    digest = chain.link(previous, entry)
    record = AuditRecord(
        seq=seq,
        at=entry.at,
        action=entry.action,
        actor_id=entry.actor_id,
        actor=entry.actor,
        target_type=entry.target_type,
        target_id=entry.target_id,
        detail=json.dumps(entry.detail, sort_keys=True),
        address=entry.address,
        user_agent=entry.user_agent,
        request_id=entry.request_id,
        prev_hash=previous,
        hash=digest,
    )
    s.add(record)
    await s.execute(update(AuditHead).where(AuditHead.id == HEAD_ID).values(hash=digest))
    await s.flush()
    return record


async def _take_head(s: AsyncSession) -> tuple[int, str]:
    """The next seq and the hash to chain from, the head row held until commit."""
    taken = (
        await s.execute(
            update(AuditHead)
            .where(AuditHead.id == HEAD_ID)
            .values(seq=AuditHead.seq + 1)
            .returning(AuditHead.seq, AuditHead.hash)
        )
    ).first()
    if taken is None:  # the first record ever
        s.add(AuditHead(id=HEAD_ID, seq=1, hash=GENESIS, anchor_seq=0, anchor_hash=GENESIS))
        await s.flush()
        return 1, GENESIS
    return int(taken[0]), str(taken[1])


async def head(s: AsyncSession) -> AuditHead:
    found = await s.get(AuditHead, HEAD_ID)
    return found or AuditHead(id=HEAD_ID, seq=0, hash=GENESIS, anchor_seq=0, anchor_hash=GENESIS)


def entry_of(row: AuditRecord) -> Entry:
    return Entry(
        seq=row.seq,
        at=row.at,
        action=row.action,
        actor_id=row.actor_id,
        actor=row.actor,
        target_type=row.target_type,
        target_id=row.target_id,
        detail=json.loads(row.detail),
        address=row.address,
        user_agent=row.user_agent,
        request_id=row.request_id,
    )


async def in_order(s: AsyncSession, after: int = 0) -> AsyncIterator[AuditRecord]:
    """Every record after ``seq`` ``after``, oldest first, read in batches."""
    while True:
        rows = list(
            await s.scalars(
                select(AuditRecord)
                .where(AuditRecord.seq > after)
                .order_by(AuditRecord.seq)
                .limit(READ_BATCH)
            )
        )
        for row in rows:
            yield row
        if len(rows) < READ_BATCH:
            return
        after = rows[-1].seq


async def page(
    s: AsyncSession,
    *,
    before: int | None,
    limit: int,
    action: str | None = None,
    subject: str | None = None,
) -> list[AuditRecord]:
    """Newest first: records before ``seq`` ``before``, of an action, about or by a user."""
    query = select(AuditRecord).order_by(AuditRecord.seq.desc()).limit(limit)
    if before is not None:
        query = query.where(AuditRecord.seq < before)
    if action is not None:
        query = query.where(AuditRecord.action == action)
    if subject is not None:
        query = query.where((AuditRecord.actor_id == subject) | (AuditRecord.target_id == subject))
    return list(await s.scalars(query))


async def prune(s: AsyncSession, older_than: datetime) -> int:
    """Records older than that deleted from the start of the chain; the head keeps the
    hash of the last one deleted, so what remains still verifies."""
    last = await s.scalar(select(func.max(AuditRecord.seq)).where(AuditRecord.at < older_than))
    if last is None:
        return 0
    kept_from = await s.get(AuditRecord, last)
    assert kept_from is not None
    done = await s.execute(delete(AuditRecord).where(AuditRecord.seq <= last))
    await s.execute(
        update(AuditHead)
        .where(AuditHead.id == HEAD_ID)
        .values(anchor_seq=last, anchor_hash=kept_from.hash)
    )
    return int(getattr(done, "rowcount", 0) or 0)
