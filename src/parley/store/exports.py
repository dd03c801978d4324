"""A user's chats read for an export, chat by chat (``portability`` writes the document).

The chats come oldest first (by ``created_at``, then id), a page of chats a query, and each
chat's messages (by ``seq``) and runs (by time) are read only when its turn comes: an export
of many chats never holds them all at once (the session's identity map keeps only the rows
still referenced). Everything is read in the caller's session (one transaction, so one
consistent view).

A chat whose rows were moved to the blob store (archived: ``archive/``) comes with the rows
the database still holds for it, none: the caller reads its messages and runs from its
archive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import RunSource
from parley.store.schema import Chat, Message, Run

PAGE = 100  # chats read a query at a time


async def export_rows(
    s: AsyncSession, *, user_id: str, page: int = PAGE
) -> AsyncIterator[tuple[Chat, list[Message], list[Run]]]:
    """Each of the user's chats with its messages and its runs (not its summary runs:
    parley's own, not the user's), oldest chat first."""
    after: tuple[datetime, str] | None = None
    while True:
        chats = await _chats_after(s, user_id, after, page)
        for chat in chats:
            yield chat, await _messages(s, user_id, chat.id), await _runs(s, user_id, chat.id)
        if len(chats) < page:
            return
        after = (chats[-1].created_at, chats[-1].id)


async def _chats_after(
    s: AsyncSession, user_id: str, after: tuple[datetime, str] | None, page: int
) -> list[Chat]:
    query = select(Chat).where(Chat.user_id == user_id)
    if after is not None:
        at, chat_id = after
        query = query.where(
            or_(Chat.created_at > at, and_(Chat.created_at == at, Chat.id > chat_id))
        )
    return list(await s.scalars(query.order_by(Chat.created_at, Chat.id).limit(page)))


async def _messages(s: AsyncSession, user_id: str, chat_id: str) -> list[Message]:
    query = (
        select(Message)
        .where(Message.user_id == user_id, Message.chat_id == chat_id)
        .order_by(Message.seq)
    )
    return list(await s.scalars(query))


async def _runs(s: AsyncSession, user_id: str, chat_id: str) -> list[Run]:
    query = (
        select(Run)
        .where(Run.user_id == user_id, Run.chat_id == chat_id, Run.source != RunSource.SUMMARY)
        .order_by(Run.created_at, Run.id)
    )
    return list(await s.scalars(query))
