"""Mails waiting to be sent (``mail/outbox.py``): written in the transaction of what they
tell of, taken by one process at a time, deleted once sent (a reset link lives only in the
mail) or given up after ``mail.give_up_seconds``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, String, Text, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.domain import new_id, utcnow
from parley.store.schema import ID, Base


class OutboxMail(Base):
    __tablename__ = "mail_outbox"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    # what to write (``accounts/recovery.py`` composes it when it is sent)
    kind: Mapped[str] = mapped_column(String(40))
    address: Mapped[str] = mapped_column(String(320))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(default=0)
    # not before this: its next try, or while a process holds it
    due_at: Mapped[datetime] = mapped_column(index=True)
    created_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(Text)


async def add(s: AsyncSession, kind: str, address: str, payload: dict[str, Any]) -> None:
    now = utcnow()
    s.add(
        OutboxMail(
            id=new_id("mail"), kind=kind, address=address, payload=payload, due_at=now,
            created_at=now,
        )
    )  # fmt: skip


async def due(s: AsyncSession, limit: int) -> list[OutboxMail]:
    query = select(OutboxMail).where(OutboxMail.due_at <= utcnow()).order_by(OutboxMail.due_at)
    return list(await s.scalars(query.limit(limit)))


async def take(s: AsyncSession, mail: OutboxMail, hold: timedelta) -> bool:
    """Hold the mail for this process a while (False: another took it first)."""
    result = await s.execute(
        update(OutboxMail)
        .where(OutboxMail.id == mail.id, OutboxMail.due_at == mail.due_at)
        .values(due_at=utcnow() + hold)
    )
    return int(getattr(result, "rowcount", 0)) == 1


async def sent(s: AsyncSession, mail_id: str) -> None:
    await s.execute(delete(OutboxMail).where(OutboxMail.id == mail_id))


async def failed(s: AsyncSession, mail_id: str, error: str, retry_in: timedelta) -> None:
    await s.execute(
        update(OutboxMail)
        .where(OutboxMail.id == mail_id)
        .values(
            attempts=OutboxMail.attempts + 1,
            due_at=utcnow() + retry_in,
            last_error=error[:500],
        )
    )
