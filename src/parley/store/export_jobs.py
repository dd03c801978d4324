"""Export jobs' rows (``portability/exports.py``), scoped by user."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import ExportStatus, is_id, new_id, utcnow
from parley.errors import NotFound, no_such
from parley.store.schema import Export


def _not_found(export_id: str) -> NotFound:
    return no_such("export", export_id, code="export_not_found", param="export_id")


async def create_export(s: AsyncSession, *, user_id: str) -> Export:
    now = utcnow()
    row = Export(
        id=new_id("exp"),
        user_id=user_id,
        status=ExportStatus.PENDING,
        created_at=now,
        updated_at=now,
    )
    s.add(row)
    await s.flush()
    return row


async def get_export(s: AsyncSession, *, user_id: str | None, export_id: str) -> Export:
    """The export (the user's, when ``user_id`` is given), or NotFound."""
    if not is_id("exp", export_id):
        raise _not_found(export_id)
    query = select(Export).where(Export.id == export_id)
    if user_id is not None:
        query = query.where(Export.user_id == user_id)
    row = await s.scalar(query)
    if row is None:
        raise _not_found(export_id)
    return row


async def list_exports(s: AsyncSession, *, user_id: str, limit: int = 20) -> list[Export]:
    query = (
        select(Export)
        .where(Export.user_id == user_id)
        .order_by(Export.created_at.desc(), Export.id.desc())
        .limit(limit)
    )
    return list(await s.scalars(query))


async def finish(s: AsyncSession, export_id: str, **values: object) -> None:
    """Move a pending export on (ready, failed), and only a pending one."""
    now = utcnow()
    await s.execute(
        update(Export)
        .where(Export.id == export_id, Export.status == ExportStatus.PENDING)
        .values(updated_at=now, finished_at=now, **values)
    )


async def stale_pending(s: AsyncSession, *, silent_since: datetime) -> list[Export]:
    query = select(Export).where(
        Export.status == ExportStatus.PENDING, Export.updated_at < silent_since
    )
    return list(await s.scalars(query))


async def expired(s: AsyncSession, *, now: datetime) -> list[Export]:
    query = select(Export).where(Export.status == ExportStatus.READY, Export.expires_at < now)
    return list(await s.scalars(query))


async def mark(s: AsyncSession, export_id: str, status: ExportStatus, error: str | None) -> None:
    await s.execute(
        update(Export)
        .where(Export.id == export_id)
        .values(status=status, error=error, updated_at=utcnow())
    )
