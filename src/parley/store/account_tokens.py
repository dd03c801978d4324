"""One-time tokens that act on an account without its password: a reset link's (mailed, or
made by an admin to hand over) and an email confirmation's. Stored only as SHA-256 hashes;
used once; expired after minutes (a reset) or a day (a confirmation)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.domain import utcnow
from parley.store.schema import Base


class AccountToken(Base):
    __tablename__ = "account_tokens"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    # "reset" or "confirm"
    kind: Mapped[str] = mapped_column(String(10))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # who made it: "mail" (the user asked), or the admin's email
    made_by: Mapped[str] = mapped_column(String(320))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


async def add(
    s: AsyncSession, token_hash: str, kind: str, user_id: str, made_by: str, expires: datetime
) -> None:
    s.add(
        AccountToken(
            token_hash=token_hash, kind=kind, user_id=user_id, made_by=made_by,
            created_at=utcnow(), expires_at=expires,
        )
    )  # fmt: skip
    await s.flush()


async def use(s: AsyncSession, token_hash: str, kind: str) -> AccountToken | None:
    """The token, marked used, if it is of ``kind``, unused and unexpired (else None); a
    concurrent second use finds it used."""
    now = utcnow()
    result = await s.execute(
        update(AccountToken)
        .where(
            AccountToken.token_hash == token_hash,
            AccountToken.kind == kind,
            AccountToken.used_at.is_(None),
            AccountToken.expires_at > now,
        )
        .values(used_at=now)
        .returning(AccountToken.user_id)
    )
    if result.first() is None:
        return None
    return await s.get(AccountToken, token_hash)


async def drop_unused(s: AsyncSession, user_id: str, kind: str) -> None:
    """Every unused token of the kind for the user spent (a reset done ends the others)."""
    await s.execute(
        update(AccountToken)
        .where(
            AccountToken.user_id == user_id,
            AccountToken.kind == kind,
            AccountToken.used_at.is_(None),
        )
        .values(used_at=utcnow())
    )
