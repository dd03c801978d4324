"""Request and response bodies of the runs API: sending a message, a run as read, and the
events of a run's stream (part of the public contract, beside ``api/schemas.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from parley.api.schemas import Strict, Text
from parley.domain import RunSource, RunStatus
from parley.engines.sampling import SamplingParams
from parley.json_types import Flag, Integer, Number
from parley.runs.events import (
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    StatusEvent,
    Usage,
)


class Sampled(Strict):
    """A chat send's sampling: its one mapping to the run's ``SamplingParams``."""

    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature)


class MessageCreate(Sampled):
    content: Annotated[Text, Field(min_length=1)]
    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    max_tokens: Annotated[Integer, Field(ge=1)] | None = None
    edit_of: Annotated[str, Field(max_length=64)] | None = Field(
        None,
        description="A user message this one replaces: the new message becomes its sibling "
        "(a new branch, shown from now on) and is answered; the old branch stays.",
    )
    attachment_ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=100)] = (
        Field(
            default_factory=list,
            description="Files uploaded to the chat (`POST /api/chats/{id}/attachments`) to send "
            "with the message: their text enters its prompt.",
        )
    )
    tools: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=32)] = Field(
        default_factory=list,
        description="The server's tools the answer may call (`search_chats`, `read_message`, "
        "`fetch_url`, `run_python`), within the tier's; the answer calls them, reads their "
        "results and goes on, within the tier's `max_tool_rounds` and `max_tool_seconds`.",
    )
    tool_choice: Literal["auto", "required"] = Field(
        default="auto",
        description="`required`: the answer's first step must call one of `tools` (then the "
        "model chooses).",
    )


class TemporaryTurn(Strict):
    role: Literal["user", "assistant"]
    content: Annotated[Text, Field(min_length=1)]


class TemporarySend(Sampled):
    """A temporary chat's next message: the whole conversation so far, its last turn the
    user's new message (the server keeps none of it)."""

    messages: Annotated[list[TemporaryTurn], Field(min_length=1, max_length=500)] = Field(
        description="The conversation, oldest first; the last one is the user's."
    )
    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    max_tokens: Annotated[Integer, Field(ge=1)] | None = None


class TemporaryAccepted(BaseModel):
    run_id: str
    status: RunStatus
    model: str = Field(description="The model that serves the run.")
    downgraded_from: str | None = None


class ToolAnswer(Strict):
    approve: Flag = Field(description="Whether the call may run.")


class ToolAnswerOut(BaseModel):
    id: str = Field(description="The call answered.")
    approve: bool


class Regenerate(Sampled):
    """Answer a message again: another answer beside it, the same or another model."""

    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = None
    max_tokens: Annotated[Integer, Field(ge=1)] | None = None


class BranchSwitch(Strict):
    message_id: Annotated[str, Field(max_length=64)] = Field(
        description="Show the branch through this message (its newest continuation)."
    )


class BranchShown(BaseModel):
    object: Literal["chat.branch"] = "chat.branch"
    chat_id: str
    active_leaf_id: str | None


class RunAccepted(BaseModel):
    run_id: str
    message_id: str = Field(description="The assistant message the run writes.")
    user_message_id: str
    status: RunStatus
    model: str = Field(description="The model that serves the run.")
    downgraded_from: str | None = Field(
        None, description="The model asked for, when a busy service downgraded the run."
    )


class PromptParts(BaseModel):
    """What went into a chat run's prompt, assembled under its input budget: tokens per
    part (each part's as counted per message; ``total_tokens`` is the model's exact count of
    the whole prompt, its template included) and which messages (by ``seq``)."""

    budget_tokens: int = Field(
        description="Window less the answer's allowance, within the tier's cap."
    )
    system_tokens: int = Field(
        description="The system prompt and custom instructions (and the message around them)."
    )
    instructions: list[str] = Field(
        default_factory=list, description='Whose custom instructions it carried: "user", "chat".'
    )
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


# The stream's events, under the names the API has always given them (the types are
# parley.runs.events's, whence the stream's OpenAPI schema too)
StatusEventData = StatusEvent
DeltaEventData = DeltaEvent
ErrorEventData = ErrorEvent
DoneEventData = DoneEvent
