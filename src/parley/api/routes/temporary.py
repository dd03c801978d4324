"""Temporary chats: the browser keeps the conversation and sends it whole with each message;
the server keeps none of its text. The run's row holds its usage (model, tokens, times) and
no text; its conversation waits on the bus for the worker (``bus.keep_input``, forgotten
when the run ends) and its answer lives on the run's stream (replayable, then expired)."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse, Response

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.routes.runs import BUDGET_429, SSE_RESPONSE, IdempotencyKey, sse, wants_json
from parley.api.run_schemas import TemporaryAccepted, TemporarySend
from parley.engines.interface import ChatMessage
from parley.errors import ValidationFailed
from parley.runs.inputs import RunInput
from parley.runs.requests import ProgramRequest

router = APIRouter(tags=["runs"])


@router.post(
    "/api/temporary/messages",
    responses={
        **SSE_RESPONSE,
        202: {"model": TemporaryAccepted, "description": "With `Accept: application/json`."},
        **errors(*AUTHED, *BODY, 503),
        **BUDGET_429,
    },
)
async def send_temporary(
    body: TemporarySend,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A temporary chat's message, answered as a send is (the system prompt and the user's
    own instructions first; streamed, resumable by `Last-Event-ID` while the stream is
    kept, stoppable, billed) but stored nowhere: no chat, no message, nothing searchable;
    the run's record holds no text (`GET /api/runs/{id}` shows its usage)."""
    if body.messages[-1].role != "user":
        raise ValidationFailed(
            "a temporary chat's last message must be the user's",
            code="last_message_not_user",
            param="messages",
        )
    given = RunInput([ChatMessage(m.role, m.content) for m in body.messages])
    req = ProgramRequest(given, body.model, body.max_tokens, body.sampling_params(), ephemeral=True)
    run = await svc.submitter.submit_program(who, req, idempotency_key)
    if wants_json(request):
        accepted = TemporaryAccepted(
            run_id=run.id, status=run.status, model=run.model, downgraded_from=run.downgraded_from
        )
        return JSONResponse(accepted.model_dump(mode="json"), status_code=status.HTTP_202_ACCEPTED)
    return sse(await svc.relay.open(who, run.id, None, owned=True))
