"""The rows a chat's prompt is made of: the chat's rolling summary and its messages since.

Read by ``context.prompts`` both when the api counts a new message's prompt (its budget
reservation) and when the worker assembles the prompt it sends, so both see the same rows;
and, with context management off, by ``prompt_of_chat``: the whole history as the worker's
``run_records.history`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import MessageRole, in_prompt, is_id
from parley.engines.interface import ChatMessage
from parley.store import chats, run_records
from parley.store.schema import Message


@dataclass(frozen=True, slots=True)
class ChatRef:
    user_id: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class ChatSummary:
    """The chat's rolling summary: it covers messages 1..``through_seq`` (0: none yet)."""

    text: str | None
    through_seq: int
    run_id: str | None  # the fold under way, if any


@dataclass(frozen=True, slots=True)
class Row:
    seq: int
    role: str
    content: str


async def unsummarized(
    s: AsyncSession,
    chat: ChatRef,
    *,
    before_seq: int | None,
    limit: int,
    summary: ChatSummary | None = None,
) -> tuple[ChatSummary, list[Row]]:
    """The chat's summary (or ``summary``: a fold about to land) and its prompt-worthy
    messages after it and before ``before_seq`` (the run's own message; None: all), the
    newest ``limit`` of them, oldest first. NotFound (``chat_not_found``) for a chat the user
    does not own."""
    found = await chats.get_chat(s, user_id=chat.user_id, chat_id=chat.chat_id)
    if summary is None:
        summary = ChatSummary(found.summary, found.summary_through_seq, found.summary_run_id)
    query = (
        select(Message.seq, Message.role, Message.status, Message.content)
        .where(
            Message.user_id == chat.user_id,
            Message.chat_id == chat.chat_id,
            Message.seq > summary.through_seq,
        )
        .order_by(Message.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        query = query.where(Message.seq < before_seq)
    rows = [
        Row(seq, role.value, content)
        for seq, role, status, content in (await s.execute(query)).all()
        if in_prompt(role, status, content)
    ]
    return summary, rows[::-1]


async def prompt_of_chat(
    s: AsyncSession, *, user_id: str, chat_id: str, content: str
) -> list[ChatMessage]:
    """With context management off: the messages a new user message ``content`` in this chat
    would be sent with, as ``run_records.history`` reads them (the newest
    ``HISTORY_LIMIT``, the new one last). NotFound for a chat the user does not own."""
    if not is_id("chat", chat_id):  # not an id at all (a NUL, say): no query may carry it
        await chats.get_chat(s, user_id=user_id, chat_id=chat_id)  # raises NotFound
    rows = (
        await s.execute(
            select(Message.role, Message.status, Message.content)
            .where(Message.user_id == user_id, Message.chat_id == chat_id)
            .order_by(Message.seq.desc())
            .limit(run_records.HISTORY_LIMIT - 1)  # the new message is the limit's last
        )
    ).all()
    if not rows:  # an empty chat, or none of this user's: only then is the chat looked up
        await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
    earlier = [
        ChatMessage(role.value, text)
        for role, status, text in reversed(rows)
        if in_prompt(role, status, text)
    ]
    return [*earlier, ChatMessage(MessageRole.USER.value, content)]
