"""Request and response bodies of the HTTP API (the public contract)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, EmailStr, Field

from parley.config import EngineKind
from parley.domain import MessageRole, MessageStatus, RunSource, RunStatus


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


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- accounts -----------------------------------------------------------------------------


class Credentials(Strict):
    email: Annotated[EmailStr, Field(max_length=320)]
    password: Annotated[Text, Field(min_length=8, max_length=1024)]


class LoginRequest(Strict):
    email: Annotated[Text, Field(min_length=1, max_length=320)]
    password: Annotated[Text, Field(min_length=1, max_length=1024)]


class UserOut(BaseModel):
    id: str
    object: Literal["user"] = "user"
    email: str
    tier: str
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
    budget: BudgetOut
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


class SessionList(BaseModel):
    object: Literal["list"] = "list"
    data: list[SessionOut]


class ApiKeyCreate(Strict):
    name: Annotated[Text, Field(min_length=1)]


class ApiKeyOut(BaseModel):
    id: str
    object: Literal["api_key"] = "api_key"
    name: str
    hint: str
    created_at: datetime
    last_used_at: datetime | None


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


class ChatUpdate(Strict):
    title: Annotated[Text, Field(min_length=1)]


class ChatOut(BaseModel):
    id: str
    object: Literal["chat"] = "chat"
    title: str
    message_count: int
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime


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


class MessageOut(BaseModel):
    id: str
    object: Literal["message"] = "message"
    chat_id: str
    seq: int
    role: MessageRole
    content: str
    status: MessageStatus
    run_id: str | None
    model: str | None
    downgraded_from: str | None = Field(
        None, description="An answer's model asked for, when a busy service downgraded it."
    )
    token_count: int | None
    created_at: datetime
    updated_at: datetime


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


# --- runs ---------------------------------------------------------------------------------


class MessageCreate(Strict):
    content: Annotated[Text, Field(min_length=1)]
    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None


class RunAccepted(BaseModel):
    run_id: str
    message_id: str = Field(description="The assistant message the run writes.")
    user_message_id: str
    status: RunStatus
    model: str = Field(description="The model that serves the run.")
    downgraded_from: str | None = Field(
        None, description="The model asked for, when a busy service downgraded the run."
    )


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(description="Of the prompt, the tokens found in the prefix cache.")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = Field(
        None, description="Present once the engine said how much of the prompt it had cached."
    )


class PromptParts(BaseModel):
    """What went into a chat run's prompt, assembled under its input budget: tokens per
    part (each part's as counted per message; ``total_tokens`` is the model's exact count of
    the whole prompt, its template included) and which messages (by ``seq``)."""

    budget_tokens: int = Field(
        description="Window less the answer's allowance, within the tier's cap."
    )
    system_tokens: int = Field(description="The system prompt (and the message around it).")
    summary_tokens: int
    summary_through_seq: int = Field(description="The summary covers messages 1..this (0: none).")
    snippet_tokens: int
    snippet_seqs: list[int] = Field(description="Older messages retrieved for this prompt.")
    recent_tokens: int
    recent_seqs: list[int] = Field(description="[first, last] of the turns sent verbatim.")
    new_message_tokens: int
    left_out_seqs: list[int] = Field(
        description="[first, last] of unsummarized turns that no longer fit (a fold is due)."
    )
    total_tokens: int
    fold_due: bool = Field(description="This prompt asked for the summary to fold further.")
    cached_tokens: int | None = Field(
        None, description="Of the prompt, the tokens the engine found in its prefix cache."
    )


class RunError(BaseModel):
    code: str
    message: str


class RunOut(BaseModel):
    id: str
    object: Literal["run"] = "run"
    source: RunSource = Field(
        description="`chat` (the chat API), `api` (a program, /v1) or `summary` (parley "
        "folding a long chat's oldest turns into its summary, in the background, unbilled)."
    )
    chat_id: str | None = Field(description="None for a program's run made without a chat.")
    message_id: str | None = Field(description="The assistant message; None without a chat.")
    user_message_id: str | None
    content: str | None = Field(
        None, description="The answer of an ended run without a chat (else in its message)."
    )
    status: RunStatus
    model: str = Field(description="The model that serves (served) the run.")
    downgraded_from: str | None = Field(
        None,
        description="The model asked for, when the service was too busy for it at the user's "
        "tier and the tier's downgrade model served the run instead.",
    )
    max_tokens: int
    finish_reason: str | None
    usage: Usage
    error: RunError | None
    prompt: PromptParts | None = Field(
        None,
        description="What went into the prompt of a chat's run, once a worker assembled it.",
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class StatusEventData(BaseModel):
    """`event: status`: the run was queued (again) or started running. The first (queued)
    names the model that serves the run, and the model asked for if a busy service
    downgraded it."""

    run_id: str
    status: RunStatus
    model: str | None = None
    downgraded_from: str | None = None


class DeltaEventData(BaseModel):
    """`event: delta`: more text; with `replace`, the whole stored text instead."""

    text: str
    tokens: int
    replace: bool = False


class ErrorEventData(BaseModel):
    """`event: error`: why the run failed or was rejected; `done` follows."""

    code: str
    message: str


class DoneEventData(BaseModel):
    """`event: done`: the last event of every run's stream."""

    run_id: str
    message_id: str | None = Field(description="None for a program's run without a chat.")
    status: RunStatus
    finish_reason: str | None
    usage: Usage


def sse_item_schema() -> dict[str, object]:
    """One event of a run's SSE stream, in OpenAPI's shape for text/event-stream items."""
    payloads: list[type[BaseModel]] = [
        StatusEventData,
        DeltaEventData,
        ErrorEventData,
        DoneEventData,
    ]
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string"},
            "event": {"type": "string", "enum": ["status", "delta", "error", "done"]},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"oneOf": [m.model_json_schema() for m in payloads]},
            },
            "retry": {"type": "integer"},
        },
    }


# --- health -------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    checks: dict[str, str]
