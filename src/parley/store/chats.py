"""Queries on chats and their messages, always scoped by user first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import is_id, new_id, utcnow
from parley.errors import Conflict, NotFound, no_such
from parley.store import branches
from parley.store.pages import Cursors, Page, invalid_cursor, page_of
from parley.store.schema import Chat, Feedback, Message, Run

Order = Literal["asc", "desc"]


CHATS_CURSOR = "chats"
_MAX_SEQ = 2**31 - 1  # messages.seq is an INTEGER column: its largest (Postgres refuses more)


def _chat_not_found(chat_id: str) -> NotFound:
    return no_such("chat", chat_id, code="chat_not_found", param="chat_id")


async def create_chat(s: AsyncSession, *, user_id: str, title: str) -> Chat:
    now = utcnow()
    chat = Chat(
        id=new_id("chat"),
        user_id=user_id,
        title=title,
        message_count=0,
        created_at=now,
        updated_at=now,
        last_activity_at=now,
    )
    s.add(chat)
    await s.flush()
    return chat


async def get_chat(s: AsyncSession, *, user_id: str, chat_id: str) -> Chat:
    """The user's chat, or NotFound: another user's chat does not exist for this one."""
    if not is_id("chat", chat_id):
        raise _chat_not_found(chat_id)
    chat = await s.scalar(select(Chat).where(Chat.user_id == user_id, Chat.id == chat_id))
    if chat is None:
        raise _chat_not_found(chat_id)
    return chat


async def get_message(s: AsyncSession, *, user_id: str, chat_id: str, message_id: str) -> Message:
    """The user's message of this chat, or NotFound (``message_not_found``)."""
    found = None
    if is_id("msg", message_id):
        found = await s.scalar(
            select(Message).where(
                Message.user_id == user_id, Message.chat_id == chat_id, Message.id == message_id
            )
        )
    if found is None:
        raise no_such("message", message_id, code="message_not_found", param="message_id")
    return found


@dataclass(frozen=True, slots=True)
class Shelf:
    """Which of a user's chats a listing shows: those on the shelf (the UI's archive) or not;
    pinned ones only, when ``pinned``."""

    shelved: bool = False
    pinned: bool = False


async def list_chats(
    s: AsyncSession,
    *,
    user_id: str,
    limit: int,
    cursor: str | None,
    cursors: Cursors,
    shelf: Shelf = Shelf(),
) -> Page[Chat]:
    """The user's chats, most recent activity first."""
    query = select(Chat).where(Chat.user_id == user_id)
    shelved = Chat.shelved_at.is_not(None)
    query = query.where(shelved if shelf.shelved else ~shelved)
    if shelf.pinned:
        query = query.where(Chat.pinned_at.is_not(None))
    if cursor is not None:
        at, last_id = chats_after(cursors, cursor)
        query = query.where(
            or_(
                Chat.last_activity_at < at,
                and_(Chat.last_activity_at == at, Chat.id < last_id),
            )
        )
    query = query.order_by(Chat.last_activity_at.desc(), Chat.id.desc()).limit(limit + 1)
    rows = list(await s.scalars(query))
    return page_of(
        rows,
        limit,
        lambda c: cursors.seal(
            CHATS_CURSOR, (c.last_activity_at.astimezone(UTC).isoformat(), c.id)
        ),
    )


def chats_after(cursors: Cursors, cursor: str) -> tuple[datetime, str]:
    """The one decoder of a chat listing's cursor: (last activity, in UTC; chat id)."""
    match cursors.open(CHATS_CURSOR, cursor):
        case [str() as at_text, str() as chat_id] if is_id("chat", chat_id):
            return _utc_time(at_text), chat_id
    raise invalid_cursor()


@dataclass(frozen=True, slots=True)
class ChatChange:
    """What a user changes of a chat (None: left as it is; instructions "" clears them)."""

    title: str | None = None
    pinned: bool | None = None
    shelved: bool | None = None
    instructions: str | None = None


async def change_chat(s: AsyncSession, *, user_id: str, chat_id: str, change: ChatChange) -> Chat:
    chat = await get_chat(s, user_id=user_id, chat_id=chat_id)
    now = utcnow()
    if change.title is not None:
        chat.title = change.title
    if change.pinned is not None:
        chat.pinned_at = now if change.pinned else None
    if change.shelved is not None:
        chat.shelved_at = now if change.shelved else None
    if change.instructions is not None:
        chat.instructions = change.instructions or None
    chat.updated_at = now
    await s.flush()
    return chat


async def delete_chat(s: AsyncSession, *, user_id: str, chat_id: str) -> str | None:
    """Delete the chat and its rows; its archive's key, if it was archived."""
    chat = await get_chat(s, user_id=user_id, chat_id=chat_id)
    key = chat.archive_key
    for table in (Run, Message, Feedback):
        await s.execute(delete(table).where(table.user_id == user_id, table.chat_id == chat_id))
    await s.execute(delete(Chat).where(Chat.user_id == user_id, Chat.id == chat_id))
    return key


async def list_messages(
    s: AsyncSession,
    *,
    user_id: str,
    chat_id: str,
    limit: int,
    cursor: str | None,
    order: Order,
    cursors: Cursors,
    shown: list[str] | None = None,
) -> Page[Message]:
    """The messages of the branch shown (``shown``: its ids, when the caller has the tree)."""
    chat = await get_chat(s, user_id=user_id, chat_id=chat_id)
    path = shown if shown is not None else (await branches.chat_tree(s, chat)).path_ids
    query = select(Message).where(
        Message.user_id == user_id, Message.chat_id == chat_id, Message.id.in_(path)
    )
    if cursor is not None:
        seq = messages_after(cursors, chat_id, cursor)
        query = query.where(Message.seq < seq if order == "desc" else Message.seq > seq)
    by = Message.seq.desc() if order == "desc" else Message.seq.asc()
    rows = list(await s.scalars(query.order_by(by).limit(limit + 1)))
    kind = messages_cursor_kind(chat_id)
    return page_of(rows, limit, lambda m: cursors.seal(kind, (m.seq,)))


def page_archived(
    messages: list[Message],
    *,
    shown: list[str],
    chat_id: str,
    limit: int,
    cursor: str | None,
    order: Order,
    cursors: Cursors,
) -> Page[Message]:
    """An archived chat's history (its rows from the archive), paged as ``list_messages``
    pages the database's, by the same cursors."""
    on_path = set(shown)
    rows = sorted(
        (m for m in messages if m.id in on_path), key=lambda m: m.seq, reverse=order == "desc"
    )
    if cursor is not None:
        seq = messages_after(cursors, chat_id, cursor)
        rows = [m for m in rows if (m.seq < seq if order == "desc" else m.seq > seq)]
    kind = messages_cursor_kind(chat_id)
    return page_of(rows[: limit + 1], limit, lambda m: cursors.seal(kind, (m.seq,)))


def messages_cursor_kind(chat_id: str) -> str:
    """A chat's history pages by cursors sealed for that chat only."""
    return f"messages:{chat_id}"


def messages_after(cursors: Cursors, chat_id: str, cursor: str) -> int:
    """The one decoder of a history cursor: the seq of the page's last message."""
    match cursors.open(messages_cursor_kind(chat_id), cursor):
        case [int() as seq] if type(seq) is int and 0 <= seq <= _MAX_SEQ:
            return seq
    raise invalid_cursor()


FOLLOWS_LAST = "<last>"
"""``add_message``'s default parent: the chat's message before this one by seq (one branch)."""


async def add_message(
    s: AsyncSession, message: Message, *, parent: str | None = FOLLOWS_LAST
) -> Message:
    """Append a message to its chat: next seq, its ``parent`` on the tree (None: a root,
    a first message or an edit of one; by default the message before it), the chat's active
    branch now ends with it, and the chat's activity moves to now."""
    seq = await s.scalar(
        update(Chat)
        .where(
            Chat.user_id == message.user_id,
            Chat.id == message.chat_id,
            Chat.archived_at.is_(None),  # restored first (``archive/``): seqs stay unique
        )
        .values(
            message_count=Chat.message_count + 1,
            last_activity_at=message.created_at,
            active_leaf_id=message.id,
        )
        .returning(Chat.message_count)
    )
    if seq is None:
        await get_chat(s, user_id=message.user_id, chat_id=message.chat_id)
        raise Conflict("the chat was archived meanwhile; send again", code="chat_archived")
    message.seq = seq
    if parent == FOLLOWS_LAST:  # (not the runs' path: they name the parent)
        parent = await s.scalar(
            select(Message.id)
            .where(Message.chat_id == message.chat_id, Message.seq < seq)
            .order_by(Message.seq.desc())
            .limit(1)
        )
    message.parent_id = parent
    s.add(message)
    await s.flush()
    return message


def new_message_id() -> str:
    return new_id("msg")


def _utc_time(value: str) -> datetime:
    """An ISO time with its offset, in UTC; InvalidRequest if it has none or leaves the
    range of a datetime once in UTC (year 1 at +01:00, year 9999 at -01:00)."""
    try:
        at = datetime.fromisoformat(value)
        if at.tzinfo is None or at.utcoffset() is None:
            raise invalid_cursor()
        return at.astimezone(UTC)
    except (ValueError, OverflowError):
        raise invalid_cursor() from None
