"""``parley engine serve``: one engine behind OpenAI's chat-completions API.

So that a fleet of built-in (or fake) engine replicas runs as processes, each reachable the
way a vLLM or llama.cpp server is, and so that other tools can use parley's engine:

* ``POST /v1/chat/completions``: streamed (server-sent chunks, ``usage`` at the end when
  ``stream_options.include_usage``, then ``[DONE]``) or whole;
* ``GET /v1/models``: the one model served;
* ``GET /health``: ``{"status": "ok", "in_flight", "served", "prefix_cache": {...}}`` —
  requests generating now, requests taken since start, and the prefix cache's lookups and
  hits (in prompt tokens; zeros on an engine without one);
* ``POST /v1/moderations``: OpenAI's moderation format, answered by a categorizer handed in
  (``parley engine serve`` hands in the rule set, ``safety/rules.py``): a moderation
  endpoint for parley's own ``endpoint`` classifier, or anyone's.

A client that goes away (or closes its stream) aborts its request: the engine frees the slot.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    Engine,
    EngineError,
    EngineRefusedRequest,
    EngineState,
    GenerationRequest,
    TokenLogprob,
)
from parley.engines.kinds import Capabilities, unable
from parley.engines.stats import engine_stats
from parley.engines.tools import ToolCall, ToolCallDelta, assembled
from parley.openai.params import refusal
from parley.openai.protocol import (
    DONE,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    ChunkFunction,
    ChunkToolCall,
    CompletionChoice,
    CompletionUsage,
    ErrorDetail,
    ErrorResponse,
    ModelCard,
    ModelCardList,
    ModerationRequest,
    ModerationResponse,
    ModerationResult,
    PromptTokensDetails,
    WireMessage,
    sse_data,
)


@dataclass(slots=True)
class _Counters:
    in_flight: int = 0
    served: int = 0


@dataclass(slots=True)
class _Answer:
    """What one request has produced, for the usage it reports."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    finish: str | None = None

    def take(self, delta: Delta) -> None:
        self.completion_tokens += delta.tokens
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.cached_tokens is not None:
            self.cached_tokens = delta.cached_tokens
        if delta.finish_reason is not None:
            self.finish = delta.finish_reason.value

    @property
    def usage(self) -> CompletionUsage:
        total = self.prompt_tokens + self.completion_tokens
        cached = self.cached_tokens
        return CompletionUsage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=total,
            prompt_tokens_details=None
            if cached is None
            else PromptTokensDetails(cached_tokens=cached),
        )


Categorize = Callable[[str], list[str]]
"""The content policy categories a text falls in (none: allowed)."""


class EngineServer:
    """The HTTP face of one engine serving one model."""

    def __init__(
        self,
        engine: Engine,
        model: str,
        *,
        default_max_tokens: int = 512,
        categorize: Categorize | None = None,
        capabilities: Capabilities | None = None,
    ) -> None:
        self.engine = engine
        self.capabilities = capabilities or Capabilities()  # what its engine can do
        self.model = model
        self.default_max_tokens = default_max_tokens
        self.categorize = categorize
        self.counters = _Counters()
        self._ids = itertools.count()

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            await self.engine.start()
            try:
                yield
            finally:
                await self.engine.close()

        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/moderations", self.moderations, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/health", self.health, methods=["GET"]),
            ],
            lifespan=lifespan,
        )

    async def models(self, _: Request) -> Response:
        return _json(ModelCardList(data=[ModelCard(id=self.model)]).model_dump())

    async def moderations(self, request: Request) -> Response:
        if self.categorize is None:
            return _error(404, "this server has no moderation", "invalid_request_error")
        try:
            body = ModerationRequest.model_validate_json(await request.body())
        except ValidationError as e:
            return _error(400, _invalid(e), "invalid_request_error")
        results = []
        for text in body.texts:
            found = self.categorize(text)
            results.append(
                ModerationResult(
                    flagged=bool(found),
                    categories=dict.fromkeys(found, True),
                    category_scores=dict.fromkeys(found, 1.0),
                )
            )
        answer = ModerationResponse(
            id=f"modr-{uuid.uuid4().hex[:24]}", model=body.model or "parley-rules", results=results
        )
        return _json(answer.model_dump())

    async def health(self, _: Request) -> Response:
        """200 ``ok`` while the engine serves; 503 with its state while it restarts after a
        failure or once it failed for good (a router then takes it off its ring)."""
        state = self.engine.state()
        if state is not EngineState.READY:
            return _json({"status": state.value, "model": self.model, **self.stats()}, 503)
        return _json({"status": "ok", "model": self.model, **self.stats()})

    def stats(self) -> dict[str, Any]:
        engine = engine_stats(self.engine)
        queries, hits = engine.prefix_queries, engine.prefix_hits
        return {
            "in_flight": self.counters.in_flight,
            "served": self.counters.served,
            "prefix_cache": {
                "queries": queries,
                "hits": hits,
                "hit_rate": hits / queries if queries else 0.0,
            },
        }

    async def chat_completions(self, request: Request) -> Response:
        try:
            body = ChatCompletionRequest.model_validate_json(await request.body())
        except ValidationError as e:
            return _error(400, _invalid(e), "invalid_request_error")
        if body.model != self.model:
            message = f"The model `{body.model}` does not exist; this server has `{self.model}`"
            return _error(404, message, "invalid_request_error", "model_not_found")
        refused = self._refused(body)
        if refused is not None:
            return _error(400, refused[1], "invalid_request_error", "unsupported_parameter")
        generation = self._generation(body)
        stream = self._counted(generation)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = None
        except EngineError as e:
            await stream.aclose()
            return _engine_error(e)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            chunks = self._chunks(generation.request_id, first, stream, include_usage)
            return StreamingResponse(
                chunks,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await self._whole(generation.request_id, first, stream)

    def _refused(self, body: ChatCompletionRequest) -> tuple[str, str] | None:
        """A field this server cannot honour, and why (``openai/params.py``; its sampling
        parameters by its engine kind's capabilities)."""
        refused = refusal(body)
        if refused is not None:
            return refused
        calls = any(m.tool_calls or m.role == "tool" for m in body.messages)
        param = unable(self.capabilities, body.sampling_params(), body.output_spec(), calls=calls)
        return None if param is None else (param, f"this server's engine cannot honour {param}")

    # -- generation -----------------------------------------------------------------------

    def _generation(self, body: ChatCompletionRequest) -> GenerationRequest:
        return GenerationRequest(
            request_id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            model=self.model,
            messages=[_message(m) for m in body.messages],
            max_tokens=body.output_limit or self.default_max_tokens,
            sampling=body.sampling_params(),
            output=body.output_spec(),
        )

    async def _counted(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        """The engine's stream, counted in flight from the first ask to the last delta."""
        self.counters.in_flight += 1
        self.counters.served += 1
        inner = self.engine.stream(request)
        try:
            async for delta in inner:
                yield delta
        finally:
            self.counters.in_flight -= 1
            await inner.aclose()  # type: ignore[attr-defined]

    async def _chunks(
        self,
        request_id: str,
        first: Delta | None,
        rest: AsyncGenerator[Delta, None],
        include_usage: bool,
    ) -> AsyncIterator[bytes]:
        answer = _Answer()
        role_sent = False
        try:
            deltas = _prepend(first, rest)
            async for delta in deltas:
                answer.take(delta)
                if (
                    delta.text
                    or delta.tool_calls
                    or not role_sent
                    or delta.finish_reason is not None
                ):
                    choice = ChunkChoice(
                        delta=ChunkDelta(
                            role=None if role_sent else "assistant",
                            content=delta.text or None,
                            tool_calls=[_chunk_call(c) for c in delta.tool_calls] or None,
                        ),
                        logprobs=_logprobs(list(delta.logprobs)),
                        finish_reason=answer.finish if delta.finish_reason else None,
                    )
                    role_sent = True
                    yield sse_data(self._chunk(request_id, [choice]))
        except EngineError as e:
            # headers are sent: the error travels as an error chunk, as vLLM does
            yield sse_data(ErrorResponse(error=ErrorDetail(message=str(e), type=e.code)))
            yield sse_data(DONE)
            return
        finally:
            await rest.aclose()
        if include_usage:
            yield sse_data(self._chunk(request_id, [], usage=answer.usage))
        yield sse_data(DONE)

    def _chunk(
        self, request_id: str, choices: list[ChunkChoice], usage: CompletionUsage | None = None
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=request_id, model=self.model, choices=choices, usage=usage)

    async def _whole(
        self, request_id: str, first: Delta | None, rest: AsyncGenerator[Delta, None]
    ) -> Response:
        answer = _Answer()
        text: list[str] = []
        calls: list[ToolCallDelta] = []
        probs: list[TokenLogprob] = []
        try:
            async for delta in _prepend(first, rest):
                answer.take(delta)
                text.append(delta.text)
                calls += delta.tool_calls
                probs += delta.logprobs
        except EngineError as e:
            return _engine_error(e)
        finally:
            await rest.aclose()
        completion = ChatCompletion(
            id=request_id,
            model=self.model,
            choices=[
                CompletionChoice(
                    message=AssistantMessage(
                        content="".join(text) or (None if calls else ""),
                        tool_calls=[c.wire() for c in assembled(calls)] or None,
                    ),
                    finish_reason=answer.finish,
                    logprobs=_logprobs(probs),
                )
            ],
            usage=answer.usage,
        )
        return _json(completion.model_dump(exclude_none=True))


def _message(m: WireMessage) -> ChatMessage:
    calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or ())
    role = "system" if m.role == "developer" else m.role
    return ChatMessage(role, m.text, calls, m.tool_call_id)


def _logprobs(probs: list[TokenLogprob]) -> ChoiceLogprobs | None:
    return ChoiceLogprobs(content=[p.wire() for p in probs]) if probs else None


def _chunk_call(call: ToolCallDelta) -> ChunkToolCall:
    first = call.id is not None
    return ChunkToolCall(
        index=call.index,
        id=call.id,
        type="function" if first else None,
        function=ChunkFunction(name=call.name, arguments=call.arguments),
    )


async def _prepend(first: Delta | None, rest: AsyncGenerator[Delta, None]) -> AsyncIterator[Delta]:
    if first is not None:
        yield first
    async for delta in rest:
        yield delta


def _invalid(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


def _engine_error(e: EngineError) -> Response:
    if isinstance(e, ContextLengthExceeded | EngineRefusedRequest):
        return _error(400, str(e), "invalid_request_error", e.code)
    return _error(503, str(e) or "the engine cannot serve this request", "server_error", e.code)


def _error(status: int, message: str, kind: str, code: str | None = None) -> Response:
    body = ErrorResponse(error=ErrorDetail(message=message, type=kind, code=code))
    return _json(body.model_dump(), status)


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return JSONResponse(body, status_code=status)
