"""Request and response bodies of the HTTP API (the public contract)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, EmailStr, Field

from parley.domain import (
    LEGACY_SCOPES,
    KeyScope,
    MessageRole,
    MessageStatus,
    Theme,
)
from parley.engines.settings import EngineKind
from parley.json_types import Flag


def _storable(value: str) -> str:
    """Text every backend can store: valid UTF-8, no NUL characters."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


# The pattern tells clients (and the OpenAPI document) that NUL is refused.
Text = Annotated[str, AfterValidator(_storable), Field(pattern=r"^[^\x00]*$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- errors -------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    type: str = Field(examples=["invalid_request_error"])
    code: str = Field(examples=["validation_error"])
    message: str
    param: str | None = None
    category: str | None = Field(
        None, description="content_blocked: the content policy category the prompt breaks."
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- accounts -----------------------------------------------------------------------------


ALTCHA = Field(
    default=None,
    max_length=4000,
    description="A solved proof-of-work (`GET /api/auth/challenge`), base64 of its JSON; "
    "needed only after 403 `challenge_required`.",
)


class Credentials(Strict):
    email: Annotated[EmailStr, Field(max_length=320)]
    password: Annotated[Text, Field(min_length=8, max_length=1024)]
    altcha: str | None = ALTCHA


class LoginRequest(Strict):
    email: Annotated[Text, Field(min_length=1, max_length=320)]
    password: Annotated[Text, Field(min_length=1, max_length=1024)]
    altcha: str | None = ALTCHA


class UserOut(BaseModel):
    id: str
    object: Literal["user"] = "user"
    email: str
    tier: str
    role: str = Field("user", description="user, auditor (reads the admin console) or admin.")
    theme: Theme = Field(Theme.SYSTEM, description="How the web client looks for them.")
    instructions: str | None = Field(None, description="What every answer of theirs heeds.")
    created_at: datetime


class AuthOut(BaseModel):
    token: str = Field(description="Session token: send as `Authorization: Bearer`.")
    csrf_token: str = Field(
        description="Send as `X-CSRF-Token` on unsafe requests authenticated by the cookie."
    )
    expires_at: datetime
    user: UserOut


class TierOut(BaseModel):
    name: str
    priority: int
    tokens_per_minute: int
    burst_tokens: int
    max_concurrent_runs: int
    max_output_tokens: int
    models: list[str]
    tools: list[str] = Field(default_factory=list, description="The server's tools it allows.")


class BudgetOut(BaseModel):
    """The user's token budget: a bucket that refills continuously up to its limit."""

    limit_tokens: int = Field(description="Capacity: the tier's `burst_tokens`.")
    remaining_tokens: int = Field(
        description="Tokens left now; below zero after runs used more than was reserved."
    )
    refill_tokens_per_minute: int
    resets_in_seconds: float = Field(ge=0, description="Seconds until the budget is full.")


class MeOut(BaseModel):
    user: UserOut
    tier: TierOut
    budget: BudgetOut | None = Field(
        description="None while the message bus, which keeps the budgets, cannot be reached."
    )
    credential: Literal["session", "api_key"]


class PasswordChange(Strict):
    current_password: Annotated[Text, Field(min_length=1, max_length=1024)]
    new_password: Annotated[Text, Field(min_length=8, max_length=1024)]


class PasswordChanged(BaseModel):
    object: Literal["password.changed"] = "password.changed"
    other_sessions_ended: int = Field(description="Sessions ended; this one goes on.")


class SessionsEnded(BaseModel):
    object: Literal["sessions.ended"] = "sessions.ended"
    ended: int


class SessionOut(BaseModel):
    """A login session (its token is never shown again)."""

    id: str
    object: Literal["session"] = "session"
    created_at: datetime
    last_used_at: datetime = Field(description="Updated at most once a minute.")
    expires_at: datetime = Field(description="Its lifetime; unused for the idle timeout, it ends.")
    current: bool = Field(description="The session this request was made with.")
    user_agent: str | None = Field(None, description="The browser or program it began in.")
    address: str | None = Field(None, description="The address it began from.")


class SessionList(BaseModel):
    object: Literal["list"] = "list"
    data: list[SessionOut]


class ApiKeyCreate(Strict):
    name: Annotated[Text, Field(min_length=1)]
    scopes: list[KeyScope] = Field(
        default_factory=lambda: sorted(KeyScope(s) for s in LEGACY_SCOPES),
        min_length=1,
        description="What it may do: `chats:read`, `chats:write`, `v1` (OpenAI's API), "
        "`models`, `admin` (an admin's or auditor's key only). Default: all but `admin`.",
    )
    models: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None, max_length=50, description="The models it may use (default: any its tier allows)."
    )
    expires_in_days: int | None = Field(
        None, ge=1, le=3650, description="It stops working after this many days (default: never)."
    )


class ApiKeyOut(BaseModel):
    id: str
    object: Literal["api_key"] = "api_key"
    name: str
    hint: str
    scopes: list[str]
    models: list[str] | None
    expires_at: datetime | None
    created_at: datetime
    last_used_at: datetime | None
    last_used_address: str | None


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The secret: shown only in this response.")


class ApiKeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ApiKeyOut]


class Deleted(BaseModel):
    id: str
    object: str
    deleted: Literal[True] = True


# --- chats --------------------------------------------------------------------------------


class ChatCreate(Strict):
    title: Text | None = None
    title_from: Text | None = Field(
        default=None,
        description="Title the chat by this message (its first line that shows something, "
        "cut to 60 characters), as the chat's first message would; not with `title`.",
    )


INSTRUCTIONS_CHARS = 4000
Instructions = Annotated[Text, Field(max_length=INSTRUCTIONS_CHARS)]


class ChatUpdate(Strict):
    """Any of these; what is left out stays as it is."""

    title: Annotated[Text, Field(min_length=1)] | None = None
    title_from: Text | None = Field(
        None, description="Title it by this message, as a chat's first message would."
    )
    pinned: Flag | None = Field(None, description="Pinned chats lead the list (?pinned=true).")
    shelved: Flag | None = Field(
        None,
        description="Archived by the user: out of the list, kept and searchable "
        "(listed with ?shelved=true); false restores it.",
    )
    instructions: Instructions | None = Field(
        None,
        description='What every answer in this chat heeds (after the user\'s own); "" clears them.',
    )


class ChatOut(BaseModel):
    id: str
    object: Literal["chat"] = "chat"
    title: str
    message_count: int
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime
    archived_at: datetime | None = Field(
        default=None,
        description="Set while the chat is archived: it reads as before (a little slower); "
        "a new message brings it back.",
    )
    pinned_at: datetime | None = None
    shelved_at: datetime | None = Field(None, description="When the user archived it.")
    instructions: str | None = None


class ChatDetail(ChatOut):
    """One chat, with what parley remembers of its older messages."""

    summary: str | None = Field(
        description="The rolling summary of the chat's older messages, as the model wrote it "
        "(a long chat's prompts carry it instead of those messages); None until the first fold."
    )
    summary_through_seq: int = Field(
        description="The summary covers messages 1..this (0: no summary yet)."
    )


class ChatList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ChatOut]
    next_cursor: str | None


class MessageError(BaseModel):
    """Why an answer failed or was refused (its run's error)."""

    code: str = Field(examples=["content_blocked"])
    message: str


class AttachmentOut(BaseModel):
    id: str
    object: Literal["attachment"] = "attachment"
    chat_id: str
    message_id: str | None = Field(description="The message it was sent with; null: waiting.")
    name: str
    media_type: str = Field(description="Told by the file's content (PDF or text).")
    size: int = Field(description="In bytes.")
    created_at: datetime


class AttachmentList(BaseModel):
    object: Literal["list"] = "list"
    data: list[AttachmentOut]


class FeedbackIn(Strict):
    rating: Literal["up", "down"]
    note: Annotated[Text, Field(max_length=2000)] | None = None


class FeedbackOut(BaseModel):
    rating: Literal["up", "down"]
    note: str | None = None
    updated_at: datetime


class MessageOut(BaseModel):
    id: str
    object: Literal["message"] = "message"
    chat_id: str
    seq: int
    role: MessageRole
    content: str
    reasoning: str | None = Field(
        None, description="An answer's reasoning, apart from it (never sent back to a model)."
    )
    tool_calls: list[dict[str, Any]] | None = Field(
        None, description="An answer's tool calls, in OpenAI's shape."
    )
    tool_call_id: str | None = Field(None, description="The call a tool message answers.")
    tool_steps: list[dict[str, Any]] | None = Field(
        None, description="The server's tools the answer ran: each call, status and result."
    )
    status: MessageStatus
    run_id: str | None
    model: str | None
    downgraded_from: str | None = Field(
        None, description="An answer's model asked for, when a busy service downgraded it."
    )
    token_count: int | None
    error: MessageError | None = Field(
        None, description="A failed or refused answer: why (the content policy, an engine ...)."
    )
    created_at: datetime
    updated_at: datetime
    parent_id: str | None = Field(None, description="The message before it on its branch.")
    sibling_ids: list[str] = Field(
        default_factory=list,
        description="It and the other versions in its place (edits, regenerated answers), "
        "oldest first; switch with PUT /api/chats/{id}/branch.",
    )
    sibling_index: int = Field(1, description="Its position among sibling_ids, from 1.")
    attachments: list[AttachmentOut] = Field(
        default_factory=list, description="The files sent with a user's message."
    )
    cut: bool = Field(False, description="An answer that ended at its token limit (continuable).")
    feedback: FeedbackOut | None = Field(None, description="The user's rating of this answer.")


class MessageList(BaseModel):
    object: Literal["list"] = "list"
    data: list[MessageOut]
    next_cursor: str | None


# --- models -------------------------------------------------------------------------------


class ModelOut(BaseModel):
    """A model the caller's tier may send to (`model` of a message)."""

    id: str = Field(description="The name to send as `model`.")
    object: Literal["model"] = "model"
    default: bool = Field(description="The model a message without `model` goes to.")
    engine: EngineKind = Field(description="What serves it.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut] = Field(description="In the configured order (the default first).")


# --- health -------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok", "failing"] = "ok"
    reason: str | None = None  # why the process cannot go on (``failing``)


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    checks: dict[str, str]
