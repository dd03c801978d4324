"""What each process serving models last said of its engines (``engines/reports.py``): one
row per process, replaced every few seconds; the admin console reads them all."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, String, delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.domain import utcnow
from parley.store.schema import Base

FORGET_AFTER = timedelta(days=1)


class EngineReport(Base):
    __tablename__ = "engine_reports"

    worker_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    # a list of ``engines.reports.ModelReport`` as JSON
    models: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    updated_at: Mapped[datetime]


async def put(s: AsyncSession, worker_id: str, models: list[dict[str, Any]]) -> None:
    now = utcnow()
    found = await s.get(EngineReport, worker_id)
    if found is None:
        s.add(EngineReport(worker_id=worker_id, models=models, updated_at=now))
    else:
        found.models, found.updated_at = models, now
    await s.execute(delete(EngineReport).where(EngineReport.updated_at < now - FORGET_AFTER))


async def remove(s: AsyncSession, worker_id: str) -> None:
    await s.execute(delete(EngineReport).where(EngineReport.worker_id == worker_id))


async def all_reports(s: AsyncSession) -> list[EngineReport]:
    return list(await s.scalars(select(EngineReport).order_by(EngineReport.worker_id)))
