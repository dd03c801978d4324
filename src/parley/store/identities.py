"""A user's accounts at OpenID Connect providers (``accounts/oidc.py``): the table, and
finding, linking and listing them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.domain import utcnow
from parley.store.schema import Base


class Identity(Base):
    """A user's account at an OpenID Connect provider (``accounts/oidc.py``)."""

    __tablename__ = "identities"

    provider: Mapped[str] = mapped_column(String(40), primary_key=True)
    subject: Mapped[str] = mapped_column(String(255), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime]


async def user_of(s: AsyncSession, provider: str, subject: str) -> str | None:
    found = await s.get(Identity, (provider, subject))
    return None if found is None else found.user_id


async def link(s: AsyncSession, provider: str, subject: str, user_id: str) -> None:
    s.add(Identity(provider=provider, subject=subject, user_id=user_id, created_at=utcnow()))
    await s.flush()


async def providers_of(s: AsyncSession, user_id: str) -> list[str]:
    found = await s.scalars(select(Identity.provider).where(Identity.user_id == user_id))
    return sorted(found)
