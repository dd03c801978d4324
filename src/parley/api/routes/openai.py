"""OpenAI's API for programs: ``GET /v1/models``, ``POST /v1/chat/completions``.

Every completion is a run like a chat's (admitted against the token budget, queued by tier,
recorded, cancellable, visible at ``/api/runs/{id}``), but it carries its own messages and
makes no chat. Unlike the chat API, a client that closes a streaming connection (or leaves
before a whole answer is ready) cancels its run, as OpenAI does. Errors use OpenAI's shape,
and every answer to an authenticated caller carries the ``x-ratelimit-*-tokens`` headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response

from parley.accounts.principal import Principal
from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.openai_wire import (
    Answer,
    ChunkWriter,
    collect,
    completion,
    program_request,
)
from parley.api.routes import AUTHED, errors
from parley.api.sse import EventStream
from parley.errors import InvalidRequest, NotFound, ParleyError, ValidationFailed
from parley.openai.protocol import (
    DONE,
    ChatCompletion,
    ChatCompletionRequest,
    ModelCapabilities,
    ModelCard,
    ModelCardList,
    sse_data,
)
from parley.qos.budget import rate_limit_headers
from parley.runs import cancel as cancelling
from parley.runs.events import (
    Batch,
    DeltaEvent,
    LogprobsEvent,
    Ping,
    ReasoningEvent,
    ToolCallEvent,
    decode,
    sse_frame,
)
from parley.services import Services
from parley.store.schema import Run

router = APIRouter(tags=["openai"])

RUN_ID_HEADER = "x-parley-run-id"
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


@router.get("/v1/models", response_model=ModelCardList, responses=errors(*AUTHED))
async def list_models(who: PrincipalDep, svc: ServicesDep) -> JSONResponse:
    """The models your tier may use, in OpenAI's list shape: chat models with what they can
    do and their context window, then embedding models (`task: embedding`)."""
    models = svc.submitter.rules.allowed_models(who.tier)
    cards = [await _card(svc, m) for m in models] + [
        ModelCard(id=m, task="embedding") for m in _embedding_models(svc, who)
    ]
    body = ModelCardList(data=cards)
    return JSONResponse(body.model_dump(mode="json"), headers=await rate_headers(svc, who))


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, responses=errors(*AUTHED, 404))
async def get_model(model_id: str, who: PrincipalDep, svc: ServicesDep) -> JSONResponse:
    """One model your tier may use; 404 ``model_not_found`` for any other."""
    if model_id in _embedding_models(svc, who):
        body = ModelCard(id=model_id, task="embedding")
    elif model_id in svc.submitter.rules.allowed_models(who.tier):
        body = await _card(svc, model_id)
    else:
        raise NotFound(f"The model `{model_id}` does not exist", code="model_not_found")
    return JSONResponse(body.model_dump(mode="json"), headers=await rate_headers(svc, who))


def _embedding_models(svc: Services, who: Principal) -> list[str]:
    return [m for m in svc.embedder.names() if svc.submitter.rules.allows(who.tier, m)]


async def _card(svc: Services, model: str) -> ModelCard:
    can = svc.submitter.rules.capabilities(model)
    window = (await svc.context.counter()).window(model)
    fields = {f: getattr(can, f) for f in ModelCapabilities.model_fields}
    return ModelCard(id=model, capabilities=ModelCapabilities(**fields), context_window=window)


COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "With `stream: true`."},
    **errors(400, *AUTHED, 404, 413, 429, 503),
}


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses=COMPLETION_RESPONSES,
)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)
    ] = None,
) -> Response:
    """A chat completion: streamed as `chat.completion.chunk` events ending with
    `data: [DONE]` (`stream: true`), or whole. Closing the connection first cancels it."""
    run = await submit_program(
        svc, who, body, idempotency_key
    )  # refusals get their headers at the edge
    headers = {**await rate_headers(svc, who), RUN_ID_HEADER: run.id}
    batches = await svc.relay.batches(who, run.id, None, owned=True)
    stop = stopper(svc, who, run.id)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        writer = ChunkWriter(run.id, run.model, include_usage=include_usage)
        return EventStream(_chunks(batches, writer, stop), headers={**STREAM_HEADERS, **headers})
    answer = await whole_answer(request, run.id, batches, stop)
    whole = completion(run.id, run.model, int(run.created_at.timestamp()), answer)
    out = whole.model_dump(mode="json", exclude_none=True)
    out["choices"][0]["message"].setdefault("content", None)  # OpenAI's null for calls only
    return JSONResponse(out, headers=headers)


async def submit_program(
    svc: Services, who: Principal, body: ChatCompletionRequest, key: str | None
) -> Run:
    """The run, with the submitter's refusals in OpenAI's terms: an unknown model is 404
    ``model_not_found``, any other invalid parameter 400 (never 422)."""
    try:
        return await svc.submitter.submit_program(who, program_request(body), key)
    except ValidationFailed as e:
        kind = NotFound if e.code == "model_not_found" else InvalidRequest
        raise kind(e.message, code=e.code, param=e.param, headers=e.headers) from None


async def rate_headers(svc: Services, who: Principal) -> dict[str, str]:
    return rate_limit_headers(await svc.budget.balance(who.user_id, who.tier))


Stopper = Callable[[], Awaitable[None]]


def stopper(svc: Services, who: Principal, run_id: str) -> Stopper:
    """Cancels the run, even from a task being cancelled (the client has gone)."""

    async def stop() -> None:
        with anyio.CancelScope(shield=True):
            await cancelling.cancel(svc.db, svc.bus, svc.finisher, who, None, run_id)

    return stop


async def _chunks(
    batches: AsyncIterator[Batch], writer: ChunkWriter, stop: Stopper
) -> AsyncIterator[bytes]:
    """The run's stream as chunks, each batch the bus gave written in one piece (its texts
    in one chunk); a client that leaves before ``done`` cancels the run."""
    answer = Answer()
    done = False
    try:
        yield writer.role()
        async for batch in batches:
            out, done = _written(batch, answer, writer)
            if out:
                yield out
            if done:
                return
    finally:
        if not done:
            await stop()


def _written(batch: Batch, answer: Answer, writer: ChunkWriter) -> tuple[bytes, bool]:
    """One batch of entries as SSE bytes, and whether it held the run's ``done``."""
    out: list[bytes] = []
    texts: list[str] = []
    probs: list[dict[str, Any]] = []

    def flush() -> None:
        if texts or probs:
            out.append(writer.content("".join(texts), list(probs) if probs else None))
            texts.clear()
            probs.clear()

    for entry in batch:
        if isinstance(entry, Ping):
            out.append(sse_frame(entry).encode())
            continue
        event = decode(entry.event)
        failed = answer.error
        if answer.take_event(event):
            flush()
            out.append(writer.end(answer) if answer.error is None else sse_data(DONE))
            return b"".join(out), True
        if answer.error is not None and failed is None:
            flush()
            out.append(writer.error(answer.error))
        elif isinstance(event, DeltaEvent) and event.text:
            texts.append(event.text)
        elif isinstance(event, LogprobsEvent):
            probs.extend(event.content)
        elif isinstance(event, ReasoningEvent) and event.text:
            flush()
            out.append(writer.reasoning(event.text))
        elif isinstance(event, ToolCallEvent):
            flush()
            out.append(writer.tool_call(event))
    flush()
    return b"".join(out), False


async def whole_answer(
    request: Request, run_id: str, batches: AsyncIterator[Batch], stop: Stopper
) -> Answer:
    """The run read to its end (cancelled if the client leaves first); a failed run's error
    raised, naming the run."""
    answer = await read_whole(request, batches, stop)
    if answer.error is not None:
        answer.error.headers = {RUN_ID_HEADER: run_id, **answer.error.headers}
        raise answer.error
    return answer


async def read_whole(request: Request, batches: AsyncIterator[Batch], stop: Stopper) -> Answer:
    """The run read to its end; if the client leaves first, the run is cancelled."""
    reading = asyncio.ensure_future(collect(batches))
    leaving = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({reading, leaving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        if not reading.done():
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            await stop()
    if reading.cancelled():  # nobody is left to read this
        return Answer(error=ParleyError("the client closed the connection", code="client_gone"))
    return reading.result()


async def _disconnected(request: Request) -> None:
    while True:
        message: dict[str, Any] = dict(await request.receive())
        if message["type"] == "http.disconnect":
            return
