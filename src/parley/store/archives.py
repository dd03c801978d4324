"""The database's side of archiving (``archive/``): which chats are due, their rows, and
the two transactions that move a chat out (pointer set, rows deleted) and back in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import TERMINAL_RUN_STATUSES, utcnow
from parley.store.schema import Chat, Message, Run


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a chat was when its rows were read: it is archived only if still so."""

    chat_id: str
    user_id: str
    message_count: int
    last_activity_at: datetime


@dataclass(frozen=True, slots=True)
class Totals:
    chats: int
    archived_chats: int
    archived_bytes: int
    messages: int


async def due_chats(
    s: AsyncSession, *, idle_since: datetime, limit: int, after: tuple[datetime, str] | None
) -> list[Chat]:
    """Chats idle since before ``idle_since``, not archived, with no run under way and no
    summary being folded, oldest activity first (after ``after``: the last one seen)."""
    busy = exists().where(
        Run.chat_id == Chat.id,
        Run.user_id == Chat.user_id,
        Run.status.not_in(TERMINAL_RUN_STATUSES),
    )
    query = select(Chat).where(
        Chat.archived_at.is_(None),
        Chat.last_activity_at < idle_since,
        Chat.summary_run_id.is_(None),
        ~busy,
    )
    if after is not None:
        at, chat_id = after
        query = query.where(
            (Chat.last_activity_at > at) | and_(Chat.last_activity_at == at, Chat.id > chat_id)
        )
    query = query.order_by(Chat.last_activity_at, Chat.id).limit(limit)
    return list(await s.scalars(query))


async def chat_rows(s: AsyncSession, chat: Chat) -> tuple[Snapshot, list[Message], list[Run]]:
    messages = await s.scalars(
        select(Message)
        .where(Message.user_id == chat.user_id, Message.chat_id == chat.id)
        .order_by(Message.seq)
    )
    runs = await s.scalars(
        select(Run).where(Run.user_id == chat.user_id, Run.chat_id == chat.id).order_by(Run.id)
    )
    snapshot = Snapshot(chat.id, chat.user_id, chat.message_count, chat.last_activity_at)
    return snapshot, list(messages), list(runs)


async def mark_archived(s: AsyncSession, snapshot: Snapshot, *, key: str, size: int) -> bool:
    """Point the chat at its archive and delete its rows, if it is as ``snapshot`` saw it
    and still has no run under way (False: it moved on; nothing changed)."""
    busy = exists().where(Run.chat_id == snapshot.chat_id, Run.status.not_in(TERMINAL_RUN_STATUSES))
    marked = await s.scalar(
        update(Chat)
        .where(
            Chat.user_id == snapshot.user_id,
            Chat.id == snapshot.chat_id,
            Chat.archived_at.is_(None),
            Chat.message_count == snapshot.message_count,
            Chat.last_activity_at == snapshot.last_activity_at,
            Chat.summary_run_id.is_(None),
            ~busy,
        )
        .values(archived_at=utcnow(), archive_key=key, archive_bytes=size)
        .returning(Chat.id)
    )
    if marked is None:
        return False
    for table in (Run, Message):
        await s.execute(
            delete(table).where(
                table.user_id == snapshot.user_id, table.chat_id == snapshot.chat_id
            )
        )
    return True


async def mark_restored(
    s: AsyncSession, chat: Chat, messages: list[Message], runs: list[Run]
) -> bool:
    """Put the rows back and clear the pointer, if the chat is still archived under the
    same key (False: another process restored it first; nothing changed). A restore is
    for a write, so it counts as activity: else the chat, idle as before, would be
    archived again by the next pass, possibly before that write (409 ``chat_archived``)."""
    cleared = await s.scalar(
        update(Chat)
        .where(
            Chat.user_id == chat.user_id,
            Chat.id == chat.id,
            Chat.archive_key == chat.archive_key,
            Chat.archived_at.is_not(None),
        )
        .values(archived_at=None, archive_key=None, archive_bytes=None, last_activity_at=utcnow())
        .returning(Chat.id)
    )
    if cleared is None:
        return False
    s.add_all(messages)
    await s.flush()
    s.add_all(runs)
    await s.flush()
    return True


async def archived_chats(s: AsyncSession, *, user_id: str) -> list[Chat]:
    query = select(Chat).where(Chat.user_id == user_id, Chat.archived_at.is_not(None))
    return list(await s.scalars(query))


async def totals(s: AsyncSession, *, user_id: str | None = None) -> Totals:
    chats = select(
        func.count(Chat.id),
        func.count(Chat.archived_at),
        func.coalesce(func.sum(Chat.archive_bytes), 0),
    )
    messages = select(func.count(Message.id))
    if user_id is not None:
        chats = chats.where(Chat.user_id == user_id)
        messages = messages.where(Message.user_id == user_id)
    count, archived, size = (await s.execute(chats)).one()
    return Totals(
        chats=int(count),
        archived_chats=int(archived),
        archived_bytes=int(size or 0),
        messages=await s.scalar(messages) or 0,
    )
