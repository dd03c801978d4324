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

# the engines give the first three of the one enum of reasons (stop, length, abort)
from parley.domain import FinishReason as FinishReason
from parley.engines.sampling import SamplingParams


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


@dataclass(frozen=True, slots=True)
class Delta:
    """New text and the number of output tokens it holds; the last one has a finish_reason."""

    text: str
    tokens: int
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt, found in the engine's prefix cache


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
