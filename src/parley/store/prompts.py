"""The prompt a chat's next run will send, known before the run is made: the admission's
budget reservation counts it (``parley.qos.costs``).

It must be the very messages the worker sends (``runs.generation.generation_request`` over
``run_records.history``): the same rows (the newest ``HISTORY_LIMIT``, the new user message
one of them), the same exclusions, the same order. A message still in progress now may have
ended by the time the run is claimed; the worker's prompt then holds it, and settlement
charges what was really sent.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import MessageRole, in_prompt, is_id
from parley.engines.interface import ChatMessage
from parley.store import chats, run_records
from parley.store.schema import Message


async def prompt_of_chat(
    s: AsyncSession, *, user_id: str, chat_id: str, content: str
) -> list[ChatMessage]:
    """The messages a new user message ``content`` in this chat would be sent with, oldest
    first, the new one last. NotFound (``chat_not_found``) for a chat the user does not own."""
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
