"""Feedback on answers: one rating (+1/-1) and an optional note per answer, the user's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import utcnow
from parley.store.schema import Feedback, Message

Rating = Literal["up", "down"]  # as the API and exports say it; stored as +1 / -1


def stored(rating: Rating) -> int:
    return 1 if rating == "up" else -1


def said(value: int) -> Rating:
    return "up" if value > 0 else "down"


async def rate(s: AsyncSession, message: Message, rating: int, note: str | None) -> Feedback:
    """Set (or change) the rating of an answer; its model is remembered with it."""
    found = await s.get(Feedback, message.id)
    now = utcnow()
    if found is None:
        found = Feedback(
            message_id=message.id,
            user_id=message.user_id,
            chat_id=message.chat_id,
            created_at=now,
        )
        s.add(found)
    found.rating, found.note, found.model, found.updated_at = rating, note, message.model, now
    await s.flush()
    return found


async def clear(s: AsyncSession, *, user_id: str, message_id: str) -> None:
    await s.execute(
        delete(Feedback).where(Feedback.user_id == user_id, Feedback.message_id == message_id)
    )


async def of_messages(
    s: AsyncSession, *, user_id: str, message_ids: Sequence[str]
) -> dict[str, Feedback]:
    """The feedback given on these messages, by message id."""
    if not message_ids:
        return {}
    rows = await s.scalars(
        select(Feedback).where(
            Feedback.user_id == user_id, Feedback.message_id.in_(list(message_ids))
        )
    )
    return {f.message_id: f for f in rows}


async def of_chat(s: AsyncSession, *, user_id: str, chat_id: str) -> dict[str, Feedback]:
    rows = await s.scalars(
        select(Feedback).where(Feedback.user_id == user_id, Feedback.chat_id == chat_id)
    )
    return {f.message_id: f for f in rows}
