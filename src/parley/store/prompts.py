"""The rows a chat's prompt is made of: the chat's rolling summary and its messages since.

Read by ``context.prompts`` both when the api counts a new message's prompt (its budget
reservation) and when the worker assembles the prompt it sends, so both see the same rows;
and, with context management off, by ``prompt_of_chat``: the whole history as the worker's
``run_records.history`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import MessageRole, in_prompt
from parley.engines.interface import ChatMessage
from parley.store import branches, chats, run_records
from parley.store.parts import MessageParts, prompt_message
from parley.store.schema import Chat, Message, User


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
    parts: MessageParts = field(default_factory=MessageParts)  # its calls, or the call it answers


async def unsummarized(
    s: AsyncSession,
    chat: ChatRef,
    *,
    before_seq: int | None,
    limit: int,
    summary: ChatSummary | None = None,
    after: str | None = branches.ACTIVE,
) -> tuple[ChatSummary, list[Row]]:
    """The chat's summary (or ``summary``: a fold about to land) and its prompt-worthy
    messages after it on the run's branch (``branches.Tree.prompt_path``: above the run's own
    message at ``before_seq``, or ending at ``after``, else the branch shown), the newest
    ``limit`` of them, oldest first. A summary that covers messages of another branch is left
    out. NotFound (``chat_not_found``) for a chat the user does not own."""
    found = await chats.get_chat(s, user_id=chat.user_id, chat_id=chat.chat_id)
    if summary is None:
        summary = ChatSummary(found.summary, found.summary_through_seq, found.summary_run_id)
    tree = await branches.chat_tree(s, found)
    path = tree.prompt_path(after=after, before_seq=before_seq)
    on_path = {n.id for n in path}
    if any(n.seq <= summary.through_seq and n.id not in on_path for n in tree.nodes.values()):
        summary = ChatSummary(None, 0, summary.run_id)  # it summarizes another branch
    unsummarized_ids = [n.id for n in path if n.seq > summary.through_seq]
    ids = unsummarized_ids[max(0, len(unsummarized_ids) - limit) :]
    query = select(Message.seq, Message.role, Message.status, Message.content, Message.parts).where(
        Message.user_id == chat.user_id, Message.chat_id == chat.chat_id, Message.id.in_(ids)
    )
    rows = [
        Row(seq, role.value, content, MessageParts.from_json(parts))
        for seq, role, status, content, parts in (
            await s.execute(query.order_by(Message.seq))
        ).all()
        if in_prompt(role, status, content)
    ]
    return summary, rows


async def prompt_of_chat(
    s: AsyncSession,
    *,
    user_id: str,
    chat_id: str,
    content: str,
    after: str | None = branches.ACTIVE,
) -> list[ChatMessage]:
    """With context management off: the messages a new user message ``content`` in this chat
    would be sent with (placed ``after``: the branch shown by default), as
    ``run_records.history`` reads them (the newest ``HISTORY_LIMIT``, the new one last).
    NotFound for a chat the user does not own."""
    found = await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
    path = (await branches.chat_tree(s, found)).prompt_path(after=after, before_seq=None)
    keep = run_records.HISTORY_LIMIT - 1  # the new message is the limit's last
    ids = [n.id for n in path][max(0, len(path) - keep) :]
    rows = (
        await s.execute(
            select(Message.role, Message.status, Message.content, Message.parts)
            .where(Message.user_id == user_id, Message.chat_id == chat_id, Message.id.in_(ids))
            .order_by(Message.seq.desc())
        )
    ).all()
    earlier = [
        prompt_message(role.value, text, MessageParts.from_json(parts))
        for role, status, text, parts in reversed(rows)
        if in_prompt(role, status, text)
    ]
    return [*earlier, ChatMessage(MessageRole.USER.value, content)]


async def instructions(s: AsyncSession, chat: ChatRef) -> tuple[str | None, str | None]:
    """The custom instructions a prompt of this chat carries: the user's, the chat's."""
    row = (
        await s.execute(
            select(User.instructions, Chat.instructions)
            .join(Chat, Chat.user_id == User.id)
            .where(User.id == chat.user_id, Chat.id == chat.chat_id)
        )
    ).first()
    return (row[0], row[1]) if row is not None else (None, None)


async def user_instructions(s: AsyncSession, user_id: str) -> str | None:
    """The user's own instructions (every conversation of theirs, a temporary one too)."""
    found: str | None = await s.scalar(select(User.instructions).where(User.id == user_id))
    return found
