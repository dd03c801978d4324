"""Making a run: a chat's (with its user message and the assistant placeholder), a program's
(the run alone, its messages on the row), or a program's kept as a new chat; queued, or
already claimed by the worker it is handed to."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from parley.domain import MessageRole, MessageStatus, RunSource, RunStatus, new_id, utcnow
from parley.engines.sampling import SamplingParams
from parley.store import attachments, branches, chats
from parley.store.parts import MessageParts
from parley.store.schema import Message, Run


@dataclass(frozen=True, slots=True)
class NewChat:
    """A chat to make with a program's run that asked to be kept (``store``): its title and
    the conversation before the run's user message: each message's role, text, and parts
    (an assistant's tool calls, the call a tool's result answers)."""

    title: str
    earlier: list[tuple[MessageRole, str, MessageParts]]


ACTIVE_LEAF = branches.ACTIVE


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to make: a chat's (``chat_id`` and the new message's ``content``) or a
    program's (``input``: its own messages and parameters, as ``runs/inputs.py`` writes)."""

    user_id: str
    chat_id: str | None
    content: str
    model: str
    tier: str
    priority: int
    max_tokens: int
    sampling: SamplingParams
    idempotency_key: str | None
    request_hash: str | None
    reserved_tokens: int | None = None
    source: RunSource = RunSource.CHAT
    input: str | None = None
    # made already claimed by this worker (a hand-off in one process), under ``lease``
    claimed_by: str | None = None
    lease: timedelta | None = None
    new_chat: NewChat | None = None  # a program's run kept as a chat
    traceparent: str | None = None  # W3C trace context of the request that made the run
    prompt_tokens: int | None = None  # counted at birth (a program's run handed off)
    downgraded_from: str | None = None  # the model asked for, when shedding chose ``model``
    tools: tuple[str, ...] = ()  # the server's tools the run may call (tools/toolbox.py)
    api_key_id: str | None = None  # the API key it was asked with (usage per key)
    tool_first: str = "auto"  # the first step's tool_choice: auto, or required (it must call)
    # where the user message goes on the chat's tree: after this message (None: a root);
    # ACTIVE_LEAF: after the branch shown (a plain send), resolved when the run is made
    after: str | None = ACTIVE_LEAF
    # a regenerated answer: the user message it answers again (no new user message)
    answer_to: str | None = None
    continues: str | None = None  # a continued answer: the answer its text begins with
    ephemeral: bool = False  # a temporary chat's: no text of it stored (``input`` on the bus)
    attachment_ids: tuple[str, ...] = ()  # the chat's waiting files the user message takes
    run_id: str = field(default_factory=lambda: new_id("run"))  # named before it is made


class DuplicateIdempotencyKey(Exception):
    """Another request with this idempotency key won the race."""


async def create_run(s: AsyncSession, new: NewRun) -> Run:
    """The queued run, in the caller's transaction; for a chat's run, with the user message
    and the assistant placeholder it writes."""
    now = utcnow()
    if new.new_chat is not None:
        new = replace(new, chat_id=await _open_chat(s, new, new.new_chat, now))
    user_msg_id, assistant_id = await _messages(s, new, now)
    return await _insert(s, _row(new, now, user_msg_id, assistant_id))


async def create_program_run(conn: AsyncConnection, new: NewRun) -> Run:
    """A program's run that opens no chat (nothing but its row to write): one INSERT, on
    its own (``Database.alone``)."""
    assert new.chat_id is None and new.new_chat is None
    return await _insert(conn, _row(new, utcnow(), None, None))


async def _insert(conn: AsyncSession | AsyncConnection, values: dict[str, object]) -> Run:
    try:  # one INSERT built once (the ORM's unit of work cost more than SQLite's own work)
        await conn.execute(_INSERT, values)
    except IntegrityError as e:  # the only unique key a new run can collide on
        raise DuplicateIdempotencyKey from e
    return Run(**values)


def _row(
    new: NewRun, now: datetime, user_msg_id: str | None, assistant_id: str | None
) -> dict[str, object]:
    """The new run's row, every column given (so that the row and the Run returned agree)."""
    return {
        **_NOTHING_YET,
        "id": new.run_id,
        "user_id": new.user_id,
        "chat_id": new.chat_id,
        "user_message_id": user_msg_id,
        "assistant_message_id": assistant_id,
        "source": new.source,
        "input": new.input,
        "api_key_id": new.api_key_id,
        **_claimed_at_birth(new, now),
        "model": new.model,
        "downgraded_from": new.downgraded_from,
        "continues_id": new.continues,
        "ephemeral": new.ephemeral,
        "tier": new.tier,
        "priority": new.priority,
        "max_tokens": new.max_tokens,
        "sampling": new.sampling,
        "idempotency_key": new.idempotency_key,
        "request_hash": new.request_hash,
        "reserved_tokens": new.reserved_tokens,
        "traceparent": new.traceparent,
        "prompt_tokens": new.prompt_tokens,
        "tools": _tools(new),
        "created_at": now,
    }


def _tools(new: NewRun) -> str | None:
    """The server's tools a chat's run may call, as its row keeps them (None: none)."""
    return json.dumps({"names": list(new.tools), "first": new.tool_first}) if new.tools else None


async def _messages(s: AsyncSession, new: NewRun, now: datetime) -> tuple[str | None, str | None]:
    """A chat run's user message (unless it answers one again) and its assistant
    placeholder, on the chat's tree; (None, None) for a program's run."""
    chat_id = new.chat_id
    if chat_id is None:
        return None, None
    if new.after == ACTIVE_LEAF:  # (the submitter names the place: then no query)
        chat = await chats.get_chat(s, user_id=new.user_id, chat_id=chat_id)
        new = replace(new, after=chat.active_leaf_id)
    # (each flushed: they exist before the run that names them)
    user_msg_id = new.answer_to or (await _add_message(s, new, MessageRole.USER, now)).id
    if new.attachment_ids and new.answer_to is None:  # (404 / 409: nothing made)
        ids = new.attachment_ids
        await attachments.link(
            s, user_id=new.user_id, chat_id=chat_id, message_id=user_msg_id, ids=ids
        )
    assistant = await _add_message(s, new, MessageRole.ASSISTANT, now, parent=user_msg_id)
    return user_msg_id, assistant.id


_INSERT = insert(cast(Table, Run.__table__))  # Core: no ORM bulk-insert machinery
# every other column of a new run, so that the row and the Run returned agree
_NOTHING_YET: dict[str, object] = {
    "output": None,
    "finish_reason": None,
    "completion_tokens": None,
    "error_code": None,
    "error_message": None,
    "worker_id": None,
    "lease_expires_at": None,
    "started_at": None,
    "finished_at": None,
}


async def _open_chat(s: AsyncSession, new: NewRun, chat: NewChat, now: datetime) -> str:
    """The chat a kept program's run goes into, with the conversation that came before it."""
    made = await chats.create_chat(s, user_id=new.user_id, title=chat.title)
    for role, content, parts in chat.earlier:
        await chats.add_message(
            s,
            Message(
                id=chats.new_message_id(),
                user_id=new.user_id,
                chat_id=made.id,
                role=role,
                content=content,
                parts=parts.to_json(),
                status=MessageStatus.COMPLETED,
                created_at=now,
                updated_at=now,
            ),
        )
    return made.id


def _claimed_at_birth(new: NewRun, now: datetime) -> dict[str, object]:
    """A new run's state: queued, or running under the worker it was made for (its first
    attempt, as a claim would leave it)."""
    if new.claimed_by is None:
        return {"status": RunStatus.QUEUED, "attempts": 0}
    assert new.lease is not None
    return {
        "status": RunStatus.RUNNING,
        "worker_id": new.claimed_by,
        "lease_expires_at": now + new.lease,
        "started_at": now,
        "attempts": 1,
    }


async def _add_message(
    s: AsyncSession,
    new: NewRun,
    role: MessageRole,
    now: datetime,
    parent: str | None = None,
) -> Message:
    """The run's user message (its content, completed; after ``new.after``) or its
    assistant placeholder (under ``parent``, its user message)."""
    assert new.chat_id is not None and new.after != ACTIVE_LEAF
    user = role is MessageRole.USER
    return await chats.add_message(
        s,
        Message(
            id=chats.new_message_id(),
            user_id=new.user_id,
            chat_id=new.chat_id,
            role=role,
            content=new.content if user else "",
            status=MessageStatus.COMPLETED if user else MessageStatus.IN_PROGRESS,
            run_id=new.run_id,
            model=None if user else new.model,
            downgraded_from=None if user else new.downgraded_from,
            created_at=now,
            updated_at=now,
        ),
        parent=new.after if user else parent,
    )
