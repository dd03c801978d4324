"""Shared links (issue 21): a user publishes a read-only snapshot of a chat's shown branch
at ``/s/<token>``, lists and revokes their links. Reading a link needs no account, shows
the snapshot as it was published (no live updates) and asks search engines not to index
it; a revoked link, or one whose chat is deleted, is 404."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Response, status
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from parley.accounts.principal import Principal
from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.api.schemas import Deleted
from parley.api.web import PAGE_HEADERS
from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.errors import NotFound
from parley.json_types import Flag
from parley.store import chats, shares
from parley.store.schema import Share
from parley.store.shares import SharedMessage

router = APIRouter(tags=["shared links"])

ROBOTS = {"X-Robots-Tag": "noindex, nofollow"}


class ShareOut(BaseModel):
    id: str
    object: Literal["share"] = "share"
    chat_id: str
    url: str = Field(description="The public link, relative to the server: /s/<token>.")
    title: str
    message_count: int
    created_at: datetime


class ShareList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ShareOut]


class ShareCreate(BaseModel):
    model_config = {"extra": "forbid"}

    tool_output: Flag = Field(
        default=False, description="Show what the chat's server tools were given and gave back."
    )


class SharedMessageOut(BaseModel):
    role: str
    content: str
    created_at: datetime
    model: str | None = None
    reasoning: str | None = Field(None, description="An answer's reasoning, apart from it.")
    tool_calls: list[dict[str, Any]] | None = Field(None, description="An answer's tool calls.")
    tool_call_id: str | None = Field(None, description="The call a tool's result answers.")
    tool_steps: list[dict[str, Any]] | None = Field(
        None, description="The server's tools the answer ran (their names and statuses only)."
    )


class SharedChat(BaseModel):
    object: Literal["shared_chat"] = "shared_chat"
    title: str
    created_at: datetime = Field(description="When the snapshot was published.")
    messages: list[SharedMessageOut]


@router.post(
    "/api/chats/{chat_id}/shares",
    status_code=status.HTTP_201_CREATED,
    response_model=ShareOut,
    responses=errors(400, *AUTHED, 404, 503),
)
async def create_share(
    chat_id: str,
    who: PrincipalDep,
    svc: ServicesDep,
    body: Annotated[ShareCreate | None, Body()] = None,
) -> ShareOut:
    """Publish a snapshot of the chat's shown branch as it is now; later messages are not
    added to it. Each call makes a new link. A server tool's steps show only that it ran
    unless `tool_output` is true."""
    async with svc.db.transaction() as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)
        rows = None if chat.archived_at is not None else await shares.chat_messages(s, chat)
    if rows is None:
        rows = (await svc.archiver.read(chat)).messages
    shown = shares.shown_path(rows, chat.active_leaf_id)
    snapshot = shares.snapshot_of(shown, tool_output=body is not None and body.tool_output)
    async with svc.db.transaction() as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)  # still there
        share = await shares.create_share(s, chat=chat, messages=snapshot)
        detail = {"chat": chat.id, "tool_output": body is not None and body.tool_output}
        await svc.audit.record_in(s, _event(AuditAction.SHARE_CREATED, who, share.id, detail))
    return _share_out(share)


@router.get("/api/shares", response_model=ShareList, responses=errors(*AUTHED))
async def list_shares(who: PrincipalDep, svc: ServicesDep) -> ShareList:
    """The user's live links, newest first (revoked ones are left out)."""
    async with svc.db.transaction() as s:
        rows = await shares.list_shares(s, user_id=who.user_id)
    return ShareList(data=[_share_out(r) for r in rows])


@router.delete("/api/shares/{share_id}", response_model=Deleted, responses=errors(*AUTHED, 404))
async def revoke_share(share_id: str, who: PrincipalDep, svc: ServicesDep) -> Deleted:
    """Revoke the link: it is 404 from now on (and leaves the list)."""
    async with svc.db.transaction() as s:
        await shares.revoke_share(s, user_id=who.user_id, share_id=share_id)
        await svc.audit.record_in(s, _event(AuditAction.SHARE_REVOKED, who, share_id, {}))
    return Deleted(id=share_id, object="share.deleted")


def _event(
    action: AuditAction, who: Principal, share_id: str, detail: dict[str, Any]
) -> AuditEvent:
    return AuditEvent(action, Actor(who.user_id, who.email), "share", share_id, detail)


@router.get("/api/shared/{token}", response_model=SharedChat, responses=errors(404))
async def read_shared(token: str, svc: ServicesDep, response: Response) -> SharedChat:
    """A shared link's snapshot, for anyone with the token (no credentials)."""
    async with svc.db.transaction() as s:
        share, messages = await shares.shared(s, token)
    response.headers.update(ROBOTS)
    return SharedChat(
        title=share.title,
        created_at=share.created_at,
        messages=[
            SharedMessageOut(
                role=m.role,
                content=m.content,
                created_at=m.created_at,
                model=m.model,
                **(m.parts or {}),
            )
            for m in messages
        ],
    )


@router.get("/s/{token}", include_in_schema=False)
async def shared_page(token: str, svc: ServicesDep) -> HTMLResponse:
    """The shared link's page: the snapshot rendered here, its text escaped."""
    headers = {**PAGE_HEADERS, **ROBOTS}
    try:
        async with svc.db.transaction() as s:
            share, messages = await shares.shared(s, token)
    except NotFound:
        return HTMLResponse(_MISSING, status_code=404, headers=headers)
    return HTMLResponse(render_page(share, messages), headers=headers)


def _share_out(share: Share) -> ShareOut:
    return ShareOut(
        id=share.id,
        chat_id=share.chat_id,
        url=f"/s/{share.token}",
        title=share.title,
        message_count=share.message_count,
        created_at=share.created_at,
    )


_HEAD = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta name="color-scheme" content="light dark">
  <meta name="robots" content="noindex, nofollow">
  <meta name="referrer" content="no-referrer">
  <title>{title}</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="/static/app.css">
  <link rel="stylesheet" href="/static/share.css">
  {script}
</head>
<body class="shared-page">
<main class="shared">
"""

_TAIL = """</main>
</body>
</html>
"""

_MISSING = (
    _HEAD.format(title="Link not found · parley", script="")
    + """<h1>This link does not exist</h1>
<p class="meta">It may have been revoked by the person who shared it, or its chat deleted.</p>
"""
    + _TAIL
)


def render_page(share: Share, messages: list[SharedMessage]) -> str:
    """The snapshot as a page; every piece of user or model text is HTML-escaped (answers
    are rendered as Markdown in the browser by ``share-page.js``, with text nodes only)."""
    when = share.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    items = "\n".join(_item(m) for m in messages)
    script = '<script type="module" src="/static/js/share-page.js"></script>'
    return (
        _HEAD.format(title=f"{escape(share.title)} · parley", script=script)
        + f"""<header class="shared-head">
  <p class="brand">parley · shared chat</p>
  <h1 dir="auto">{escape(share.title)}</h1>
  <p class="meta">A snapshot shared on {when}; later messages are not shown.</p>
</header>
<ol class="message-list shared-messages">
{items}
</ol>
"""
        + _TAIL
    )


def _item(m: SharedMessage) -> str:
    parts = m.parts or {}
    who = {"user": "User", "tool": "Tool result"}.get(m.role) or m.model or "Assistant"
    reasoning = parts.get("reasoning")
    folded = (
        '<details class="reasoning"><summary>Reasoning</summary>'
        f'<div class="reasoning-text" dir="auto">{escape(reasoning)}</div></details>'
        if reasoning
        else ""
    )
    calls = "".join(_call(c) for c in parts.get("tool_calls") or ())
    for step in parts.get("tool_steps") or ():
        calls += _step(step)
    kind = "tool-result" if m.role == "tool" else "content plain"
    stopped = '<p class="message-note">Stopped</p>' if m.stopped else ""
    return (
        f'<li class="message {escape(m.role)}"><div class="bubble">'
        f'<div class="who">{escape(who)}</div>{folded}'
        f'<div class="{kind}" dir="auto">{escape(m.content)}</div>{calls}{stopped}</div></li>'
    )


def _step(step: dict[str, Any]) -> str:
    """A server tool's step: that it ran, and (the owner chose so) what it gave back."""
    function = step.get("function") or {}
    name = escape(str(step.get("name") or function.get("name")))
    status = escape(str(step.get("status")))
    if "result" not in step:
        return f'<p class="tool-step">Ran {name} ({status})</p>'
    return (
        f'<details class="tool-call"><summary>Ran {name} ({status})</summary>'
        f"<pre>{escape(str(function.get('arguments')))}</pre>"
        f"<pre>{escape(str(step['result']))}</pre></details>"
    )


def _call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    return (
        f'<details class="tool-call"><summary>Called {escape(str(function.get("name")))}'
        f"</summary><pre>{escape(str(function.get('arguments')))}</pre></details>"
    )
