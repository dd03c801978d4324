"""parley's export document, and the plain records an import hands to the store.

An export is one ``ExportDocument``: ``{"format": "parley.export", "version": 1,
"exported_at", "user": {...}, "chats": [...]}``, each chat with every message (in ``seq``
order) and every run's metadata (not a program's input nor a chat's summary runs: those are
parley's own). Times are ISO 8601 in UTC. Reading one back (``ExportDocument.model_validate``)
refuses times without an offset and fields it does not know of, so a document of another
version or a hand-edited one fails loudly instead of importing half.

An import, whatever its source, is an ``ImportBatch``: chats of messages, times and models
kept, ids not (the store gives new ones: an imported id could be another user's).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from parley.domain import MessageRole, MessageStatus, RunSource, RunStatus
from parley.store import feedback as ratings
from parley.store.parts import MessageParts
from parley.store.schema import Chat, Feedback, Message, Run, User
from parley.text import storable

EXPORT_FORMAT: Final = "parley.export"
EXPORT_VERSION: Final = 1
EXPORT_FILE_NAME = "parley-export.json"
"""The document's name inside an export archive (beside each chat's Markdown)."""


PART_FIELDS = {"reasoning", "tool_calls", "tool_call_id", "tool_steps"}


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserDocument(_Document):
    id: str
    email: str
    tier: str
    created_at: AwareDatetime
    instructions: str | None = None  # custom instructions for every answer


class RunDocument(_Document):
    """One generation's metadata: what was asked for, how it went, what it cost."""

    id: str
    source: RunSource
    status: RunStatus
    model: str
    downgraded_from: str | None = None
    tier: str
    max_tokens: int
    temperature: float | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    created_at: AwareDatetime
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    user_message_id: str | None = None
    assistant_message_id: str | None = None


class FunctionDocument(_Document):
    name: str
    arguments: str


class ToolCallDocument(_Document):
    id: str
    type: Literal["function"] = "function"
    function: FunctionDocument


class FeedbackDocument(_Document):
    rating: Literal["up", "down"]
    note: str | None = None


class MessageDocument(_Document):
    id: str
    seq: int
    role: MessageRole
    content: str
    # an answer's reasoning and tool calls, the call a tool's result answers (parts.py)
    reasoning: str | None = None
    tool_calls: list[ToolCallDocument] | None = None
    tool_call_id: str | None = None
    # the server's tools the answer ran: each call, its status and result
    tool_steps: list[dict[str, Any]] | None = None
    status: MessageStatus
    model: str | None = None
    downgraded_from: str | None = None
    created_at: AwareDatetime
    run_id: str | None = None
    # the message before it on its branch (edits and regenerated answers are siblings)
    parent_id: str | None = None
    feedback: FeedbackDocument | None = None  # the user's rating of an answer


class ChatDocument(_Document):
    id: str
    title: str
    created_at: AwareDatetime
    updated_at: AwareDatetime
    last_activity_at: AwareDatetime
    archived: bool = False
    pinned: bool = False
    shelved: bool = False  # archived by the user (out of the list)
    instructions: str | None = None  # custom instructions for this chat
    active_leaf_id: str | None = None  # the branch shown ends here
    messages: list[MessageDocument]
    runs: list[RunDocument] = []


class ExportDocument(_Document):
    format: Literal["parley.export"] = EXPORT_FORMAT
    version: Literal[1] = EXPORT_VERSION
    exported_at: AwareDatetime
    user: UserDocument
    chats: list[ChatDocument]


def user_document(user: User) -> UserDocument:
    return UserDocument(
        id=user.id,
        email=user.email,
        tier=user.tier,
        created_at=user.created_at,
        instructions=user.instructions,
    )


def message_document(message: Message, feedback: Feedback | None = None) -> MessageDocument:
    parts = MessageParts.from_json(message.parts).wire()
    rated = None
    if feedback is not None:
        rated = FeedbackDocument(rating=ratings.said(feedback.rating), note=feedback.note)
    return MessageDocument(
        id=message.id,
        seq=message.seq,
        role=message.role,
        content=message.content,
        **parts,
        status=message.status,
        model=message.model,
        downgraded_from=message.downgraded_from,
        created_at=message.created_at,
        run_id=message.run_id,
        parent_id=message.parent_id,
        feedback=rated,
    )


def run_document(run: Run) -> RunDocument:
    return RunDocument(
        id=run.id,
        source=run.source,
        status=run.status,
        model=run.model,
        downgraded_from=run.downgraded_from,
        tier=run.tier,
        max_tokens=run.max_tokens,
        temperature=None if run.sampling is None else run.sampling.temperature,
        finish_reason=run.finish_reason,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        cached_tokens=run.cached_tokens,
        error_code=run.error_code,
        error_message=run.error_message,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        user_message_id=run.user_message_id,
        assistant_message_id=run.assistant_message_id,
    )


def chat_document(
    chat: Chat,
    messages: Sequence[Message],
    runs: Sequence[Run],
    *,
    archived: bool,
    feedback: Mapping[str, Feedback] | None = None,
) -> ChatDocument:
    """The chat as exported: its messages by ``seq``, its runs by time (summary runs left
    out: parley's own, not the user's)."""
    return ChatDocument(
        id=chat.id,
        title=chat.title,
        created_at=chat.created_at,
        updated_at=chat.updated_at,
        last_activity_at=chat.last_activity_at,
        archived=archived,
        pinned=chat.pinned_at is not None,
        shelved=chat.shelved_at is not None,
        instructions=chat.instructions,
        active_leaf_id=chat.active_leaf_id,
        messages=[
            message_document(m, (feedback or {}).get(m.id))
            for m in sorted(messages, key=lambda m: m.seq)
        ],
        runs=[
            run_document(r)
            for r in sorted(runs, key=lambda r: (r.created_at, r.id))
            if r.source is not RunSource.SUMMARY
        ],
    )


def export_document(
    user: User, chats: Sequence[ChatDocument], *, exported_at: datetime
) -> ExportDocument:
    return ExportDocument(exported_at=exported_at, user=user_document(user), chats=list(chats))


async def export_json(
    user: User, chats: AsyncIterable[ChatDocument], *, exported_at: datetime
) -> AsyncIterator[bytes]:
    """The export document's JSON in pieces, a chat at a time (as ``store/exports.py``
    reads them): the same text as ``export_document(...).model_dump_json()``, never held
    whole."""
    empty = export_document(user, [], exported_at=exported_at).model_dump_json()
    head, tail = empty.removesuffix("]}"), "]}"
    yield head.encode()
    first = True
    async for chat in chats:
        yield (b"" if first else b",") + chat.model_dump_json().encode()
        first = False
    yield tail.encode()


# --- what an import read ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    role: MessageRole
    content: str
    created_at: datetime  # timezone-aware, UTC
    status: MessageStatus = MessageStatus.COMPLETED
    # an answer's reasoning and calls, the call a tool's result answers (``MessageParts.wire``)
    parts: dict[str, Any] | None = None
    model: str | None = None  # an answer's model, when the source names it
    source_id: str | None = None  # its id in the export (a parley export's tree)
    parent_source_id: str | None = None
    feedback: tuple[int, str | None] | None = None  # the user's rating (+1/-1) and note


@dataclass(frozen=True, slots=True)
class ImportedChat:
    title: str
    created_at: datetime
    updated_at: datetime
    messages: tuple[ImportedMessage, ...]
    archived: bool = False
    source_id: str | None = None  # the chat's id in the export it came from (never reused)
    # a parley export's tree: messages by their parent_source_id, this branch shown; else
    # (ChatGPT's shown branch, an older export) one branch in order
    tree: bool = False
    active_source_id: str | None = None
    pinned: bool = False
    shelved: bool = False
    instructions: str | None = None


ImportSource = Literal["parley", "chatgpt"]


@dataclass(frozen=True, slots=True)
class ImportBatch:
    source: ImportSource
    chats: tuple[ImportedChat, ...]

    @property
    def message_count(self) -> int:
        return sum(len(c.messages) for c in self.chats)


def imported_chat(doc: ChatDocument) -> ImportedChat:
    """A chat of parley's export as an import record. An answer exported while it was still
    being written comes back cancelled: no run will ever finish it."""
    return ImportedChat(
        title=storable(doc.title),
        created_at=doc.created_at.astimezone(UTC),
        updated_at=doc.updated_at.astimezone(UTC),
        archived=doc.archived,
        source_id=doc.id,
        tree=any(m.parent_id for m in doc.messages),
        active_source_id=doc.active_leaf_id,
        pinned=doc.pinned,
        shelved=doc.shelved,
        instructions=storable(doc.instructions) if doc.instructions else None,
        messages=tuple(
            ImportedMessage(
                role=m.role,
                content=storable(m.content),
                parts=m.model_dump(include=PART_FIELDS, exclude_none=True) or None,
                created_at=m.created_at.astimezone(UTC),
                status=(
                    MessageStatus.CANCELLED if m.status is MessageStatus.IN_PROGRESS else m.status
                ),
                model=m.model,
                source_id=m.id,
                parent_source_id=m.parent_id,
                feedback=_rating(m.feedback),
            )
            for m in sorted(doc.messages, key=lambda m: m.seq)
        ),
    )


def _rating(said: FeedbackDocument | None) -> tuple[int, str | None] | None:
    if said is None:
        return None
    return (ratings.stored(said.rating), storable(said.note) if said.note else None)
