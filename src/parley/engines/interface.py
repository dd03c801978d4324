"""The engine contract: stream a chat request as deltas with token counts; abort.

A stream ends with one delta that carries a ``finish_reason``: ``stop`` or ``length`` when
the model finished, ``abort`` when ``abort(request_id)`` (or the engine itself) stopped it.
A request the engine cannot serve at all raises an ``EngineError`` from the stream: an
``EngineUnavailable`` (retryable) when no output has been produced and another replica may
serve it, any other ``EngineError`` when the request itself is at fault or its output broke
off (then the text already yielded stands).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

# the engines give the first three of the one enum of reasons (stop, length, abort), and
# tool_calls
from parley.domain import FinishReason as FinishReason
from parley.engines.sampling import SamplingParams
from parley.engines.tools import OutputSpec, ToolCall, ToolCallDelta, merged


class EngineState(StrEnum):
    """Whether an engine can serve: ``ready``; ``restarting`` after a failure of its own
    (requests wait, or fail with ``engine_unavailable``); ``failed`` for good (the process
    that holds it should exit, for its supervisor to start a new one)."""

    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    # an assistant's calls (a conversation carries them back), or the call a tool message
    # answers
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    model: str
    messages: list[ChatMessage]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    priority: int = 0
    # what keeps a conversation on one replica (its prefix stays cached there): the chat id
    affinity_key: str | None = None
    # tools offered, a response format, a reasoning effort (an engine that can do them)
    output: OutputSpec = field(default_factory=OutputSpec)
    # the last message is an answer begun (one cut at its limit): the model goes on from its
    # last character, no end of turn after it and no new turn begun (vLLM's
    # ``continue_final_message``); its text is not said again
    continue_final: bool = False


@dataclass(frozen=True, slots=True)
class TopLogprob:
    """A token the model could have said at a place, and its log probability."""

    token: str
    logprob: float
    bytes: tuple[int, ...]

    def wire(self) -> dict[str, object]:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes)}


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token of the answer, its log probability, and the likeliest at its place."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...] = ()

    def wire(self) -> dict[str, object]:
        """As OpenAI's ``logprobs.content`` holds it."""
        return {
            "token": self.token,
            "logprob": self.logprob,
            "bytes": list(self.bytes),
            "top_logprobs": [t.wire() for t in self.top],
        }


@dataclass(frozen=True, slots=True)
class Delta:
    """New text and the number of output tokens it holds; the last one has a finish_reason.
    A model that reasons says so apart from its answer (``reasoning``), and a model that
    calls tools streams its calls in fragments (``tool_calls``)."""

    text: str
    tokens: int
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt, found in the engine's prefix cache
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()  # when asked: one per token of ``text``


def joined_deltas(deltas: list[Delta]) -> Delta:
    """Deltas (no finish among them) as one: texts, reasoning and call fragments each in
    their order (a reasoning model reasons before it answers; calls come after text)."""
    if len(deltas) == 1:
        return deltas[0]
    return Delta(
        "".join(d.text for d in deltas),
        sum(d.tokens for d in deltas),
        reasoning="".join(d.reasoning for d in deltas),
        tool_calls=merged([c for d in deltas for c in d.tool_calls]),
        logprobs=tuple(p for d in deltas for p in d.logprobs),
    )


class EngineError(Exception):
    """The engine could not serve the request; ``code`` names why (for the run's error)."""

    code = "engine_error"
    retryable = False  # True: nothing was produced, and another replica may serve it


class EngineUnavailable(EngineError):
    """The engine (or the replica asked) could not take the request: refused, overloaded, a
    server error or silence before the first token. Another replica may serve it."""

    code = "engine_unavailable"
    retryable = True


class UpstreamRejected(EngineError):
    """The upstream server refused the request as malformed or not allowed (a 4xx)."""

    code = "upstream_rejected"


class UpstreamBroken(EngineError):
    """The upstream's answer broke off: a malformed chunk, a cut or silence mid-stream."""

    code = "upstream_failed"


class EngineFailed(EngineError):
    """The engine itself failed while the request was in it (the request was not at fault);
    the engine restarts, and the request's output so far stands."""

    code = "engine_failed"


class EngineRefusedRequest(EngineError):
    """The engine cannot take the request's parameters (a value out of its range)."""

    code = "invalid_engine_request"


class ContextLengthExceeded(EngineError):
    """The prompt does not fit in what the engine can hold."""

    code = "context_length_exceeded"


class Engine(Protocol):
    async def start(self) -> None:
        """Begin background work (an upstream's health probes); idempotent."""

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        """The prompt's length in the model's tokens (chat template included)."""

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        """Generate; closing the iterator early aborts the request and frees its slot."""

    async def abort(self, request_id: str) -> None:
        """Stop a request now and free its slot; a no-op for unknown ids."""

    def state(self) -> EngineState:
        """Whether the engine can serve now (readiness, and the process's supervision)."""

    async def close(self) -> None: ...
