"""The events of a run's stream: one type each, and everything derived from them.

A run's stream is ``status`` (queued, running), ``delta`` (more text), ``error`` and ``done``
(always the last). Each is a type here, with its SSE name (``kind``): the worker, the
finisher and the relay make them (``encode`` puts one on the bus as a ``RunEvent``), the
relay frames them as SSE (``sse_frame``), the OpenAPI document describes them
(``stream_schema``), /v1's chunk writer and the sweeper read them back (``decode``), and the
web client names them (``web/js/events.js``, which ``scripts/shape.py`` holds to ``KINDS``).
A new event is one type here, added to ``EVENT_TYPES``, and its handling where it is read.
A relay's ping is not an event of the stream: ``PING``, framed as an SSE comment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field

from parley.bus.interface import EventKind, RunEvent, StreamEntry
from parley.domain import RunStatus
from parley.engines.interface import Delta
from parley.store.schema import Run


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(description="Of the prompt, the tokens found in the prefix cache.")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = Field(
        None, description="Present once the engine said how much of the prompt it had cached."
    )


class _Event(BaseModel):
    """What every event type shares: its SSE name, and data read leniently (a stream written
    by another version of parley may carry fields this one does not know)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    kind: ClassVar[EventKind]


class StatusEvent(_Event):
    """`event: status`: the run was queued (again) or started running. The first (queued)
    names the model that serves the run, and the model asked for if a busy service
    downgraded it."""

    kind: ClassVar[EventKind] = EventKind.STATUS
    run_id: str
    status: RunStatus
    model: str | None = None
    downgraded_from: str | None = None


class DeltaEvent(_Event):
    """`event: delta`: more text; with `replace`, the whole stored text instead."""

    kind: ClassVar[EventKind] = EventKind.DELTA
    text: str
    tokens: int
    replace: bool = False


class ReasoningEvent(_Event):
    """`event: reasoning`: more of the model's reasoning, apart from its answer (shown
    folded, never part of the answer's text or of later prompts; its tokens are billed)."""

    kind: ClassVar[EventKind] = EventKind.REASONING
    text: str
    tokens: int = 0


class ToolCallEvent(_Event):
    """`event: tool_call`: a fragment of the answer's `index`-th tool call: its `id` and
    `name` come once (the first fragment), its JSON `arguments` in pieces."""

    kind: ClassVar[EventKind] = EventKind.TOOL_CALL
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    tokens: int = 0


class LogprobsEvent(_Event):
    """`event: logprobs`: the log probabilities of the answer's tokens just sent, when the
    request asked for them (`logprobs`): each token, its log probability and bytes, and the
    likeliest tokens at its place (OpenAI's `logprobs.content` items)."""

    kind: ClassVar[EventKind] = EventKind.LOGPROBS
    content: list[dict[str, Any]]


class ToolFileRef(BaseModel):
    """A file a tool made, kept as an attachment of the answer (``GET
    /api/attachments/{id}/content``)."""

    id: str
    name: str
    media_type: str
    size: int


class ToolResultEvent(_Event):
    """`event: tool_result`: a server-side tool ran one of the answer's calls (`id`, the
    call's): how it went (`ok`, `error`, `refused`, `timeout`), the start of what it gave
    the model (`preview`) and the files it made (`files`, attachments of the answer)."""

    kind: ClassVar[EventKind] = EventKind.TOOL_RESULT
    id: str
    name: str
    status: str
    preview: str
    files: list[ToolFileRef] = Field(default_factory=list)


class ToolConfirmEvent(_Event):
    """`event: tool_confirm`: a call of a tool the operator marked waits for the user's
    yes or no (`POST /api/runs/{run_id}/tool-calls/{id}`), for `seconds` at most."""

    kind: ClassVar[EventKind] = EventKind.TOOL_CONFIRM
    id: str
    name: str
    arguments: str
    seconds: float


class ToolAnswerEvent(_Event):
    """`event: tool_answer`: the user's answer to a `tool_confirm` (the call `id` runs if
    `approve`)."""

    kind: ClassVar[EventKind] = EventKind.TOOL_ANSWER
    id: str
    approve: bool


class ErrorEvent(_Event):
    """`event: error`: why the run failed or was rejected; `done` follows. Without an id and
    with `retry_after`, the stream itself was cut (`dependency_unavailable`): resume it from
    the last event id after that many seconds."""

    kind: ClassVar[EventKind] = EventKind.ERROR
    code: str
    message: str
    retry_after: float | None = None


class DoneEvent(_Event):
    """`event: done`: the last event of every run's stream."""

    kind: ClassVar[EventKind] = EventKind.DONE
    run_id: str
    message_id: str | None = Field(description="None for a program's run without a chat.")
    status: RunStatus
    finish_reason: str | None
    usage: Usage


StreamEvent = (
    StatusEvent
    | DeltaEvent
    | ReasoningEvent
    | ToolCallEvent
    | LogprobsEvent
    | ToolResultEvent
    | ToolConfirmEvent
    | ToolAnswerEvent
    | ErrorEvent
    | DoneEvent
)
EVENT_TYPES: Final[dict[EventKind, type[StreamEvent]]] = {
    t.kind: t
    for t in (
        StatusEvent,
        DeltaEvent,
        ReasoningEvent,
        ToolCallEvent,
        LogprobsEvent,
        ToolResultEvent,
        ToolConfirmEvent,
        ToolAnswerEvent,
        ErrorEvent,
        DoneEvent,
    )
}
KINDS: Final = tuple(kind.value for kind in EVENT_TYPES)


class Ping:
    """What a relay yields after each quiet interval: not an event of the stream (no id, no
    data), written as an SSE comment."""

    __slots__ = ()


PING: Final = Ping()
Batch = Sequence[StreamEntry | Ping]  # what a relay writes to its client in one piece


def encode(event: StreamEvent) -> RunEvent:
    """The event as the bus carries it: its kind and its data as JSON, its optional fields
    left out while they hold their defaults."""
    return RunEvent.encoded(event.kind, event.model_dump_json(exclude=_defaulted(event)))


def _defaulted(event: StreamEvent) -> set[str]:
    return {name for name, default in _OPTIONAL[type(event)] if getattr(event, name) == default}


# each event type's optional fields and their defaults, read once (encode runs per token)
_OPTIONAL: Final[dict[type[StreamEvent], tuple[tuple[str, Any], ...]]] = {
    t: tuple((n, f.default) for n, f in t.model_fields.items() if not f.is_required())
    for t in EVENT_TYPES.values()
}


def decode(event: RunEvent) -> StreamEvent:
    """A bus event read back as its type."""
    return EVENT_TYPES[event.kind].model_validate(event.data)


def status_event(run_id: str, status: RunStatus) -> RunEvent:
    return encode(StatusEvent(run_id=run_id, status=status))


def made_event(run: Run) -> RunEvent:
    """A new run's first event (queued): which model serves it, and, for a run a busy
    service downgraded, the model asked for."""
    made = StatusEvent(
        run_id=run.id,
        status=RunStatus.QUEUED,
        model=run.model,
        downgraded_from=run.downgraded_from,
    )
    return encode(made)


def delta_event(text: str, tokens: int = 1, *, replace: bool = False) -> RunEvent:
    return encode(DeltaEvent(text=text, tokens=tokens, replace=replace))


def plain_delta_event(text: str, tokens: int) -> RunEvent:
    """``delta_event(text, tokens)`` without building and serializing the model: the very
    JSON pydantic writes for it (a test holds the two equal), made once per token."""
    quoted = json.dumps(text, ensure_ascii=False)
    return RunEvent.encoded(EventKind.DELTA, f'{{"text":{quoted},"tokens":{int(tokens)}}}')


def delta_events(delta: Delta) -> list[RunEvent]:
    """An engine's delta as the stream's events, in order: reasoning, text, call fragments;
    its tokens counted on the first. A plain text delta (nearly every one) is one event,
    built once."""
    if not (delta.reasoning or delta.tool_calls or delta.logprobs):
        if not (delta.text or delta.tokens):
            return []
        return [plain_delta_event(delta.text, delta.tokens)]
    tokens = delta.tokens
    events: list[StreamEvent] = []
    if delta.reasoning:
        events.append(ReasoningEvent(text=delta.reasoning, tokens=tokens))
        tokens = 0
    if delta.text or (delta.logprobs and not delta.tool_calls):
        events.append(DeltaEvent(text=delta.text, tokens=tokens))
        tokens = 0
    if delta.logprobs:
        events.append(LogprobsEvent(content=[p.wire() for p in delta.logprobs]))
    for c in delta.tool_calls:
        events.append(
            ToolCallEvent(index=c.index, id=c.id, name=c.name, arguments=c.arguments, tokens=tokens)
        )
        tokens = 0
    return [encode(e) for e in events]


def error_event(code: str, message: str, *, retry_after: float | None = None) -> RunEvent:
    return encode(ErrorEvent(code=code, message=message, retry_after=retry_after))


def done_event(run: Run) -> RunEvent:
    done = DoneEvent(
        run_id=run.id,
        message_id=run.assistant_message_id,
        status=run.status,
        finish_reason=run.finish_reason,
        usage=usage(run),
    )
    return encode(done)


def usage(run: Run) -> Usage:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` once the engine said
    how much of the prompt its prefix cache held."""
    prompt = run.prompt_tokens or 0
    completion = run.completion_tokens or 0
    cached = run.cached_tokens
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=None if cached is None else PromptTokensDetails(cached_tokens=cached),
    )


def sse_frame(entry: StreamEntry | Ping) -> str:
    """An entry as an SSE event; one without an id (the relay's own, not the stream's)
    has no ``id:`` line, so a client's Last-Event-ID stays the stream's last. A ping is a
    comment."""
    if isinstance(entry, Ping):
        return ": ping\n\n"
    head = f"id: {entry.id}\n" if entry.id else ""
    return f"{head}event: {entry.event.kind.value}\ndata: {entry.event.json}\n\n"


def stream_schema() -> dict[str, object]:
    """One event of a run's SSE stream, in OpenAPI's shape for text/event-stream items."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string"},
            "event": {"type": "string", "enum": list(KINDS)},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                # the payload of the event named by `event`
                "contentSchema": {
                    "anyOf": [_inlined(t.model_json_schema()) for t in EVENT_TYPES.values()]
                },
            },
            "retry": {"type": "integer"},
        },
    }


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` put in place: nested inside the document, a
    ``#/$defs/…`` reference would point at the document's root, where there are none."""
    defs: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    inlined: dict[str, Any] = resolve(schema)
    return inlined
