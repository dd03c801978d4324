"""OpenAI's Responses API for programs, the stateless part: ``POST /v1/responses``.

A response is a run like a chat completion's — the body is read into the chat-completions
request it asks for (``openai/responses.as_chat``) and served by the same path: admitted
against the token budget, queued by tier, recorded, cancellable (``/api/runs/{id}``; the
response's id is ``resp_<run id>``), cancelled when a client leaves first. Streamed, its
semantic events (``api/responses_wire.py``); whole, one ``response`` object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.responses_wire import ResponseEvents, echo, response
from parley.api.routes.openai import (
    COMPLETION_RESPONSES,
    RUN_ID_HEADER,
    STREAM_HEADERS,
    Stopper,
    rate_headers,
    stopper,
    submit_program,
    whole_answer,
)
from parley.api.sse import EventStream
from parley.errors import InvalidRequest
from parley.openai.protocol import ChatCompletionRequest
from parley.openai.responses import Refused, ResponsesRequest, as_chat, refusal
from parley.runs.events import Batch, Ping, decode, sse_frame

router = APIRouter(tags=["openai"])


@router.post("/v1/responses", responses=COMPLETION_RESPONSES)
async def create_response(
    body: ResponsesRequest,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)
    ] = None,
) -> Response:
    """A model response: streamed as semantic events (`stream: true`), or whole. Closing
    the connection first cancels it."""
    run = await submit_program(svc, who, chat_request(body), idempotency_key)
    headers = {**await rate_headers(svc, who), RUN_ID_HEADER: run.id}
    batches = await svc.relay.batches(who, run.id, None, owned=True)
    stop = stopper(svc, who, run.id)
    settings = echo(body)
    if body.stream:
        events = ResponseEvents(run.id, run.model, settings)
        return EventStream(_events(batches, events, stop), headers={**STREAM_HEADERS, **headers})
    answer = await whole_answer(request, run.id, batches, stop)
    whole = response(run.id, run.model, int(run.created_at.timestamp()), settings, answer)
    return JSONResponse(whole, headers=headers)


def chat_request(body: ResponsesRequest) -> ChatCompletionRequest:
    """The chat-completions request the body asks for; a 400 naming what parley refuses."""
    refused = refusal(body)
    if refused is not None:
        raise InvalidRequest(refused[1], code="unsupported_parameter", param=refused[0])
    try:
        return ChatCompletionRequest.model_validate(as_chat(body))
    except Refused as e:
        raise InvalidRequest(str(e), code="unsupported_parameter", param=e.param) from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}", code="invalid_value") from None


async def _events(
    batches: AsyncIterator[Batch], events: ResponseEvents, stop: Stopper
) -> AsyncIterator[bytes]:
    """The run's stream as the response's events; a client that leaves first cancels it."""
    done = False
    try:
        yield events.start()
        async for batch in batches:
            out: list[bytes] = []
            for entry in batch:
                if isinstance(entry, Ping):
                    out.append(sse_frame(entry).encode())
                    continue
                written, done = events.take(decode(entry.event))
                out.append(written)
                if done:
                    break
            yield b"".join(out)
            if done:
                return
    finally:
        if not done:
            await stop()
