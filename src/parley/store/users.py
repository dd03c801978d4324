"""Queries on users."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import new_id, utcnow
from parley.errors import Conflict
from parley.store.schema import User


def normalize_email(email: str) -> str:
    return email.strip().lower()


async def create_user(
    s: AsyncSession, *, email: str, password_hash: str, tier: str, confirmed: bool = True
) -> User:
    """``confirmed``: its email taken as confirmed (not a sign-up awaiting its link)."""
    now = utcnow()
    user = User(
        id=new_id("user"),
        email=normalize_email(email),
        password_hash=password_hash,
        tier=tier,
        created_at=now,
        updated_at=now,
        email_confirmed_at=now if confirmed else None,
    )
    s.add(user)
    try:
        async with s.begin_nested():
            await s.flush()
    except IntegrityError as e:
        raise Conflict(
            "an account with this email already exists", code="email_taken", param="email"
        ) from e
    return user


async def get_user(s: AsyncSession, user_id: str) -> User | None:
    return await s.get(User, user_id)


async def find_user_by_email(s: AsyncSession, email: str) -> User | None:
    return await s.scalar(select(User).where(User.email == normalize_email(email)))


async def list_users(s: AsyncSession) -> list[User]:
    return list(await s.scalars(select(User).order_by(User.created_at, User.id)))


async def search_users(
    s: AsyncSession, *, query: str | None, limit: int, after: str | None
) -> list[User]:
    """Users whose email holds ``query`` (any, without one), by email, after ``after``."""
    found = select(User).order_by(User.email).limit(limit)
    if query:
        escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found = found.where(User.email.like(f"%{escaped}%", escape="\\"))
    if after is not None:
        found = found.where(User.email > after)
    return list(await s.scalars(found))


async def count_admins(s: AsyncSession, *, excluding: str) -> int:
    """Admins who can still sign in, but ``excluding``."""
    counted = await s.scalar(
        select(func.count())
        .select_from(User)
        .where(User.role == "admin", User.disabled_at.is_(None), User.id != excluding)
    )
    return int(counted or 0)


async def set_tier(s: AsyncSession, user: User, tier: str) -> None:
    user.tier = tier
    user.updated_at = utcnow()


async def set_password_hash(s: AsyncSession, user: User, password_hash: str) -> None:
    user.password_hash = password_hash
    user.updated_at = utcnow()


async def delete_user(s: AsyncSession, user_id: str) -> bool:
    """The user's row, and by ``ON DELETE CASCADE`` every row that names them."""
    deleted = await s.scalar(delete(User).where(User.id == user_id).returning(User.id))
    return deleted is not None
