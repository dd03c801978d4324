"""Core types shared by every layer: states as Enums, ids, clocks."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from enum import StrEnum


class MessageRole(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"  # a tool's result, answering a call of the assistant message before it


class MessageStatus(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    REJECTED = "rejected"


def in_prompt(role: MessageRole, status: MessageStatus, content: str) -> bool:
    """Whether a message of the history goes into a prompt: the user's always; an answer
    when it completed, or was cancelled after saying something (not while in progress,
    nor failed or rejected)."""
    return (
        role is MessageRole.USER
        or status is MessageStatus.COMPLETED
        or (status is MessageStatus.CANCELLED and bool(content))
    )


class FinishReason(StrEnum):
    """Why a run's answer ended: the engine's reasons (``STOP``, ``LENGTH``, ``ABORT``) and
    the run's own (cancelled by its user, failed, stopped by the content policy)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    CANCELLED = "cancelled"
    ERROR = "error"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"  # the model called tools: their results make the next turn


class RunStatus(StrEnum):
    """The life of one generation: queued → running → one of TERMINAL."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    REJECTED = "rejected"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.REJECTED}
)

QUEUE_WAIT_EXCEEDED = "queue_wait_exceeded"
"""The error of a run still queued past its tier's ``max_queue_wait_seconds``."""

CONTENT_BLOCKED = "content_blocked"
"""The error of a run the content policy refused: its prompt, or its answer as it streamed."""

MODERATION_UNAVAILABLE = "moderation_unavailable"
"""The error of an answer stopped because a classifier that fails closed gave no verdict."""


class RunSource(StrEnum):
    """Who asked for a run: a chat (the web UI, ``/api``), a program (``/v1``) or parley
    itself (a chat's summary)."""

    CHAT = "chat"
    API = "api"
    SUMMARY = "summary"  # a chat's rolling summary folded further (background, unbilled)


class ExportStatus(StrEnum):
    """An export job: made (``pending``), written (``ready``, until it expires) or not."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"
    EXPIRED = "expired"


BACKGROUND_PRIORITY = -1
"""The queue priority of background runs (summaries): below every tier's (0..1000), so a
worker takes one only when no user's run is queued."""


class CredentialKind(StrEnum):
    """How a request proved who it is."""

    SESSION = "session"
    API_KEY = "api_key"


class KeyScope(StrEnum):
    """What an API key may do (a login session may do all of it)."""

    CHATS_READ = "chats:read"  # read chats, messages, runs, search, files
    CHATS_WRITE = "chats:write"  # send, edit, delete, share, upload
    COMPLETIONS = "v1"  # OpenAI's API: completions, responses, embeddings
    MODELS = "models"  # list the models
    ADMIN = "admin"  # the admin console's routes (the key's user must be an admin or auditor)


# a key made before scopes existed may do everything but administer
LEGACY_SCOPES = frozenset(s.value for s in KeyScope if s is not KeyScope.ADMIN)


class Theme(StrEnum):
    """How the web client looks for a user: as their system says, or always light or dark."""

    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"


class UserRole(StrEnum):
    """What a user may do beyond their own data: an auditor reads the admin console, an
    admin also changes it."""

    USER = "user"
    AUDITOR = "auditor"
    ADMIN = "admin"


def utcnow() -> datetime:
    return datetime.now(UTC)


_ID_BYTES = 12
_HEX = frozenset("0123456789abcdef")


def new_id(prefix: str) -> str:
    """An opaque, unguessable id such as ``chat_3q2…``."""
    return f"{prefix}_{secrets.token_hex(_ID_BYTES)}"


def is_id(prefix: str, value: str) -> bool:
    """Whether ``value`` has the shape of an id ``new_id(prefix)`` makes: ``<prefix>_`` and
    lower-case hex, nothing else (so no NUL, no non-ASCII, no unbounded length)."""
    head, sep, tail = value.partition("_")
    return head == prefix and bool(sep) and len(tail) == 2 * _ID_BYTES and _HEX.issuperset(tail)
