"""Branches: answer a message again, continue an answer, show another branch. (Editing a
message is a send with ``edit_of``: ``POST /api/chats/{id}/messages``.)"""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse, Response

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.routes.runs import (
    BUDGET_429,
    SSE_RESPONSE,
    IdempotencyKey,
    accepted,
    sse,
    wants_json,
)
from parley.api.run_schemas import BranchShown, BranchSwitch, Regenerate, RunAccepted
from parley.runs.requests import SendRequest
from parley.store import branches, chats

router = APIRouter(tags=["runs"])


@router.post(
    "/api/chats/{chat_id}/messages/{message_id}/regenerate",
    responses={
        **SSE_RESPONSE,
        202: {"model": RunAccepted, "description": "With `Accept: application/json`."},
        **errors(*AUTHED, 404, *BODY, 503),
        **BUDGET_429,
    },
)
async def regenerate(
    chat_id: str,
    message_id: str,
    body: Regenerate,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Answer again: a new answer beside ``message_id`` (an answer: for its question; a
    user message: for it), with the same or another model. The new answer's branch is shown
    from now on; the old answer stays, a sibling. Streams as a send does."""
    req = SendRequest(
        "-", body.model, body.max_tokens, body.sampling_params(), regenerate=message_id
    )  # (the question's own text is sent)
    return await _answered(chat_id, req, request, who, svc, idempotency_key)


@router.post(
    "/api/chats/{chat_id}/messages/{message_id}/continue",
    responses={
        **SSE_RESPONSE,
        202: {"model": RunAccepted, "description": "With `Accept: application/json`."},
        **errors(*AUTHED, 404, *BODY, 503),
        **BUDGET_429,
    },
)
async def continue_answer(
    chat_id: str,
    message_id: str,
    body: Regenerate,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Continue an answer (one cut at its token limit, or stopped): a new version of it
    beside it, its text the old answer's and then what the model says next, as if it had
    not stopped (the model is given the old answer as its own turn begun). Billed as any
    run: the old answer counts in its prompt; only the new text is its output. The model:
    as a send's (the web UI sends the answer's own). 422 `not_continuable` for a question
    or an answer that has not ended. Streams as a send does; the stream begins with the
    old answer's text (a `delta` of 0 tokens)."""
    req = SendRequest(
        "-", body.model, body.max_tokens, body.sampling_params(), continue_of=message_id
    )
    return await _answered(chat_id, req, request, who, svc, idempotency_key)


async def _answered(
    chat_id: str,
    req: SendRequest,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    key: str | None,
) -> Response:
    """A new answer beside an old one: submitted, then streamed or accepted as a send."""
    run = await svc.submitter.submit(who, chat_id, req, key)
    if wants_json(request):
        return JSONResponse(accepted(run), status_code=status.HTTP_202_ACCEPTED)
    return sse(await svc.relay.open(who, run.id, None, owned=True))


@router.put(
    "/api/chats/{chat_id}/branch", response_model=BranchShown, responses=errors(*AUTHED, 404, *BODY)
)
async def show_branch(
    chat_id: str, body: BranchSwitch, who: PrincipalDep, svc: ServicesDep
) -> BranchShown:
    """Show the branch through ``message_id``: from it, always the newest continuation."""
    async with svc.db.transaction() as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)
    if chat.archived_at is not None:  # its messages back in the database first
        await svc.archiver.restore(chat)
    async with svc.db.transaction() as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)
        await chats.get_message(s, user_id=who.user_id, chat_id=chat_id, message_id=body.message_id)
        tree = await branches.chat_tree(s, chat)
        leaf = tree.newest_leaf_under(body.message_id)
        await branches.set_active_leaf(s, chat, leaf)
    return BranchShown(chat_id=chat_id, active_leaf_id=leaf)
