"""A run as OpenAI's chat-completions API shows it: a request read into a program's run,
the run's stream as ``chat.completion.chunk`` events ending with ``data: [DONE]``, or the
whole run as one ``chat.completion``; a failed run as OpenAI's error shape.

The wire types are ``parley.openai.protocol``'s; the chunks of a streamed answer are written
from a template made once per run (only the text is encoded per chunk), since relaying
them is most of what ``/v1`` costs per token.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from parley.bus.interface import StreamEntry
from parley.domain import CONTENT_BLOCKED, MODERATION_UNAVAILABLE, FinishReason, RunStatus
from parley.engines.interface import ChatMessage
from parley.engines.tools import ToolCall, ToolCallDelta, assembled
from parley.errors import InvalidRequest, ParleyError, Unavailable
from parley.openai.params import refusal
from parley.openai.protocol import (
    DONE,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    ChoiceLogprobs,
    CompletionChoice,
    CompletionUsage,
    sse_data,
)
from parley.runs.events import (
    Batch,
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    LogprobsEvent,
    Ping,
    ReasoningEvent,
    StreamEvent,
    ToolCallEvent,
    decode,
)
from parley.runs.inputs import RunInput
from parley.runs.requests import ProgramRequest

# finish reasons of runs that did not complete (OpenAI has none for a stopped request;
# vLLM's "abort" is the one OpenAI-compatible servers use)
ABORTED = "abort"
MODERATED = frozenset({CONTENT_BLOCKED, MODERATION_UNAVAILABLE})


def program_request(body: ChatCompletionRequest) -> ProgramRequest:
    """What the run is asked; InvalidRequest for what parley would otherwise ignore."""
    _refuse_unsupported(body)
    messages = []
    for i, m in enumerate(body.messages):
        if m.non_text_parts:
            raise InvalidRequest(
                f"only text content is supported, not {m.non_text_parts[0]!r}",
                code="unsupported_content",
                param=f"messages.{i}.content",
            )
        role = "system" if m.role == "developer" else m.role
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or ()
        )
        messages.append(ChatMessage(role, m.text, calls, m.tool_call_id))
    return ProgramRequest(
        input=RunInput(messages, output=body.output_spec()),
        model=body.model,
        max_tokens=body.output_limit,
        sampling=body.sampling_params(),
        store=body.store,
    )


def _refuse_unsupported(body: ChatCompletionRequest) -> None:
    refused = refusal(body)
    if refused is not None:
        param, why = refused
        raise InvalidRequest(why, code="unsupported_parameter", param=param)


def completion_id(run_id: str) -> str:
    return f"chatcmpl-{run_id}"


@dataclass(slots=True)
class Answer:
    """What a run's stream told, read to its ``done``."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCallDelta] = field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None  # when asked for: each token's
    finish_reason: str | None = None
    usage: CompletionUsage = field(default_factory=CompletionUsage)
    error: ParleyError | None = None

    def take(self, entry: StreamEntry | Ping) -> bool:
        """Take one entry in; True once it was the run's ``done``."""
        return not isinstance(entry, Ping) and self.take_event(decode(entry.event))

    def take_event(self, event: StreamEvent) -> bool:
        """Take one event in; True once it was the run's ``done``."""
        match event:
            case DeltaEvent(text=text, replace=replace):
                if replace:
                    self.text.clear()
                self.text.append(text)
            case ReasoningEvent(text=text):
                self.reasoning.append(text)
            case ToolCallEvent(index=index, id=id_, name=name, arguments=arguments):
                self.calls.append(ToolCallDelta(index, id_, name, arguments))
            case LogprobsEvent(content=content):
                self.logprobs = (self.logprobs or []) + content
            case ErrorEvent(code=code) if code in MODERATED:
                pass  # an answer moderation stopped ends as OpenAI's do: "content_filter"
            case ErrorEvent(code=code, message=message):
                self.error = run_error(code, message)
            case DoneEvent():
                self.finish_reason = finish_reason(event)
                self.usage = CompletionUsage.model_validate(event.usage.model_dump())
                return True
        return False


def finish_reason(done: DoneEvent) -> str:
    reason = done.finish_reason
    if reason is not None and (
        done.status is RunStatus.COMPLETED or reason == FinishReason.CONTENT_FILTER
    ):
        return reason
    return ABORTED


def run_error(code: str, message: str) -> ParleyError:
    """A run's failure as the error a client of OpenAI's API expects for it."""
    if code in ("context_length_exceeded", "upstream_rejected"):
        return InvalidRequest(message, code=code, param="messages")
    if code == "engine_unavailable":
        return Unavailable(message, code=code, retry_after=1.0)
    return ParleyError(message, code=code)


async def collect(batches: AsyncIterator[Batch]) -> Answer:
    answer = Answer()
    async for batch in batches:
        for entry in batch:
            if answer.take(entry):
                return answer
    return answer


def completion(run_id: str, model: str, created: int, answer: Answer) -> ChatCompletion:
    return ChatCompletion(
        id=completion_id(run_id),
        created=created,
        model=model,
        choices=[
            CompletionChoice(
                message=message(answer),
                finish_reason=answer.finish_reason,
                logprobs=None
                if answer.logprobs is None
                else ChoiceLogprobs(content=answer.logprobs),
            )
        ],
        usage=answer.usage,
    )


def message(answer: Answer) -> AssistantMessage:
    """The whole answer: its text (None when it only calls tools), its reasoning, its calls."""
    text, calls = "".join(answer.text), assembled(answer.calls)
    return AssistantMessage(
        content=text if text or not calls else None,
        reasoning_content="".join(answer.reasoning) or None,
        tool_calls=[c.wire() for c in calls] or None,
    )


class ChunkWriter:
    """The SSE events of one streamed completion, each a ``chat.completion.chunk``."""

    def __init__(self, run_id: str, model: str, *, include_usage: bool) -> None:
        self._head = (
            '{"id":' + json.dumps(completion_id(run_id)) + ',"object":"chat.completion.chunk",'
            f'"created":{int(time.time())},"model":' + json.dumps(model) + ',"choices":'
        )
        self._include_usage = include_usage

    def _event(self, choices: str, usage: str = "") -> bytes:
        return f"data: {self._head}{choices}{usage}}}\n\n".encode()

    def role(self) -> bytes:
        return self._event(
            '[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]'
        )

    def content(self, text: str, logprobs: list[dict[str, Any]] | None = None) -> bytes:
        """More of the answer (and its tokens' log probabilities, when asked for)."""
        probs = "" if logprobs is None else ',"logprobs":' + json.dumps({"content": logprobs})
        return self._event(
            '[{"index":0,"delta":{"content":'
            + json.dumps(text, ensure_ascii=False)
            + '},"finish_reason":null'
            + probs
            + "}]"
        )

    def reasoning(self, text: str) -> bytes:
        return self._event(
            '[{"index":0,"delta":{"reasoning_content":'
            + json.dumps(text, ensure_ascii=False)
            + '},"finish_reason":null}]'
        )

    def tool_call(self, call: ToolCallEvent) -> bytes:
        """A call's fragment in OpenAI's shape: index, then id, type and name on the first,
        then pieces of the arguments."""
        piece: dict[str, object] = {"index": call.index}
        function: dict[str, object] = {"arguments": call.arguments}
        if call.id is not None:
            piece.update(id=call.id, type="function")
        if call.name is not None:
            function = {"name": call.name, **function}
        piece["function"] = function
        calls = json.dumps([piece], ensure_ascii=False)
        return self._event(
            '[{"index":0,"delta":{"tool_calls":' + calls + '},"finish_reason":null}]'
        )

    def end(self, answer: Answer) -> bytes:
        """The last chunks: the finish reason, the usage if asked for, then ``[DONE]``."""
        out = self._event(
            '[{"index":0,"delta":{},"finish_reason":' + json.dumps(answer.finish_reason) + "}]"
        )
        if self._include_usage:
            out += self._event("[]", ',"usage":' + answer.usage.model_dump_json())
        return out + sse_data(DONE)

    @staticmethod
    def error(error: ParleyError) -> bytes:
        """An error mid-stream, as OpenAI sends one (the official client raises on it)."""
        body = {"message": error.message, "type": error.type, "code": error.code}
        return f"data: {json.dumps({'error': {**body, 'param': error.param}})}\n\n".encode()
