"""Runs: send a prompt (SSE or 202), read a run, rejoin its stream, stop it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, status
from fastapi.responses import JSONResponse, Response, StreamingResponse

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.run_schemas import (
    MessageCreate,
    PromptParts,
    RunAccepted,
    RunError,
    RunOut,
    ToolAnswer,
    ToolAnswerOut,
)
from parley.api.sse import EventStream
from parley.domain import RunStatus
from parley.errors import Conflict
from parley.runs import cancel as cancelling
from parley.runs.events import KINDS, ToolAnswerEvent, encode, stream_schema, usage
from parley.runs.relay import run_of
from parley.runs.requests import SendRequest
from parley.store.schema import Run

router = APIRouter(tags=["runs"])

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
SSE_DOC = (
    f"Server-sent events: `id: <event id>`, `event: {'|'.join(KINDS)}`, `data: <json>`;"
    " comment pings on idle streams. The stream ends after `done`."
)
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": SSE_DOC,
        "content": {"text/event-stream": {"schema": stream_schema()}},
    }
}

_INTEGER = {"type": "integer", "minimum": 0}
BUDGET_429: dict[int | str, dict[str, Any]] = {
    429: {
        **errors(429)[429],
        "description": "Token budget exhausted (`budget_exhausted`, with the `x-ratelimit-*` "
        "headers) or too many open streams (`too_many_streams`); see Retry-After",
        "headers": {
            "Retry-After": {"description": "Seconds to wait.", "schema": _INTEGER},
            "x-ratelimit-limit-tokens": {
                "description": "The token budget's capacity.",
                "schema": _INTEGER,
            },
            "x-ratelimit-remaining-tokens": {
                "description": "Tokens left now.",
                "schema": _INTEGER,
            },
            "x-ratelimit-reset-tokens": {
                "description": "Time until the budget is full again, e.g. `12s`.",
                "schema": {"type": "string", "pattern": "^[0-9]+s$"},
            },
        },
    }
}

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Same key + same body: the same run; different body: 422. Kept 24 h.",
    ),
]


@router.post(
    "/api/chats/{chat_id}/messages",
    response_class=StreamingResponse,
    responses={
        **SSE_RESPONSE,
        202: {"model": RunAccepted, "description": "With `Accept: application/json`."},
        **errors(*AUTHED, 404, 409, *BODY, 503),
        **BUDGET_429,
    },
)
async def send_message(
    chat_id: str,
    body: MessageCreate,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Send a prompt: stream the answer as SSE, or 202 with the run's ids for JSON clients.

    The run's cost (`max_tokens` + the prompt as it will be sent, counted with the model's
    tokenizer, or estimated high without one) is reserved on the user's token budget first,
    and settled to the tokens it really used when it ends; without enough budget: 429
    `budget_exhausted`. A retry with the same `Idempotency-Key` is never charged again.
    `tools` naming an MCP server that acts as the user and that they have not connected:
    409 `tool_not_connected`."""
    if svc.toolbox is not None:
        await svc.toolbox.mcp.oauth.check_connected(who.user_id, body.tools)
    run = await svc.submitter.submit(who, chat_id, _send_request(body), idempotency_key)
    if wants_json(request):
        return JSONResponse(accepted(run), status_code=status.HTTP_202_ACCEPTED)
    events = await svc.relay.open(who, run.id, None, owned=True)
    return sse(events)


def _send_request(body: MessageCreate) -> SendRequest:
    return SendRequest(
        body.content,
        body.model,
        body.max_tokens,
        body.sampling_params(),
        edit_of=body.edit_of,
        attachment_ids=tuple(body.attachment_ids),
        tools=tuple(dict.fromkeys(body.tools)),
        tool_first=body.tool_choice,
    )


def accepted(run: Run) -> dict[str, Any]:
    assert run.assistant_message_id is not None and run.user_message_id is not None
    accepted = RunAccepted(
        run_id=run.id,
        message_id=run.assistant_message_id,
        user_message_id=run.user_message_id,
        status=run.status,
        model=run.model,
        downgraded_from=run.downgraded_from,
    )
    return accepted.model_dump(mode="json")


@router.get("/api/runs/{run_id}", response_model=RunOut, responses=errors(*AUTHED, 404))
async def get_run(run_id: str, who: PrincipalDep, svc: ServicesDep) -> RunOut:
    return run_out(await run_of(svc.db, who, run_id))


@router.get(
    "/api/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={**SSE_RESPONSE, **errors(400, *AUTHED, 404, 422, 429)},
)
async def run_events(
    run_id: str,
    who: PrincipalDep,
    svc: ServicesDep,
    last_event_id_header: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=64)
    ] = None,
    last_event_id: Annotated[
        str | None, Query(max_length=64, description="Same as the Last-Event-ID header.")
    ] = None,
) -> Response:
    """The run's events after `Last-Event-ID` (all of them without one)."""
    events = await svc.relay.open(who, run_id, last_event_id_header or last_event_id)
    return sse(events)


@router.post(
    "/api/chats/{chat_id}/runs/{run_id}/cancel",
    response_model=RunOut,
    responses=errors(*AUTHED, 404),
)
async def cancel_run(chat_id: str, run_id: str, who: PrincipalDep, svc: ServicesDep) -> RunOut:
    """Stop the run. A queued run ends at once; a running one stops within moments."""
    return run_out(await cancelling.cancel(svc.db, svc.bus, svc.finisher, who, chat_id, run_id))


@router.post("/api/runs/{run_id}/cancel", response_model=RunOut, responses=errors(*AUTHED, 404))
async def cancel_any_run(run_id: str, who: PrincipalDep, svc: ServicesDep) -> RunOut:
    """Stop a run by its id alone (a program's run has no chat). A queued run ends at once;
    a running one stops within moments."""
    return run_out(await cancelling.cancel(svc.db, svc.bus, svc.finisher, who, None, run_id))


@router.post(
    "/api/runs/{run_id}/tool-calls/{call_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ToolAnswerOut,
    responses=errors(400, *AUTHED, 404, 409),
)
async def answer_tool_call(
    run_id: str, call_id: str, body: ToolAnswer, who: PrincipalDep, svc: ServicesDep
) -> ToolAnswerOut:
    """Allow (or not) a call of a tool the operator marked, that the running answer waits
    on (its `tool_confirm` event); the answer reaches the run through its stream."""
    run = await run_of(svc.db, who, run_id)
    if run.status is not RunStatus.RUNNING:
        raise Conflict(
            f"run {run_id} is {run.status.value}: it waits on no call", code="run_not_running"
        )
    await svc.bus.append(run_id, encode(ToolAnswerEvent(id=call_id, approve=body.approve)))
    return ToolAnswerOut(id=call_id, approve=body.approve)


def run_out(run: Run) -> RunOut:
    error = (
        RunError(code=run.error_code, message=run.error_message or "") if run.error_code else None
    )
    return RunOut(
        id=run.id,
        source=run.source,
        chat_id=run.chat_id,
        content=run.output if run.assistant_message_id is None else None,
        message_id=run.assistant_message_id,
        user_message_id=run.user_message_id,
        status=run.status,
        model=run.model,
        downgraded_from=run.downgraded_from,
        max_tokens=run.max_tokens,
        finish_reason=run.finish_reason,
        usage=usage(run),
        error=error,
        prompt=_prompt_parts(run),
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


def _prompt_parts(run: Run) -> PromptParts | None:
    if run.prompt_parts is None:
        return None
    return PromptParts(**json.loads(run.prompt_parts), cached_tokens=run.cached_tokens)


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/event-stream" not in accept


def sse(events: AsyncIterator[str]) -> StreamingResponse:
    return EventStream(events, headers=SSE_HEADERS)
