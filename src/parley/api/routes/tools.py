"""The server's tools as a user sees them (those their tier allows), and connecting the MCP
servers that act as the user: ``connect`` answers the authorization server's address to
send the browser to; the authorization server sends it back to ``callback``, which keeps
the user's tokens (sealed, on the server: the browser never holds them) and returns the
browser to the app; ``DELETE …/connection`` forgets them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.returns import back_to_app, callback_url
from parley.api.routes import AUTHED, errors
from parley.errors import ParleyError, Unavailable
from parley.services import Services
from parley.tools.mcp import PREFIX
from parley.tools.mcp_oauth import McpOAuth
from parley.tools.toolbox import Toolbox

router = APIRouter(prefix="/api/tools", tags=["tools"])

CALLBACK = "/api/tools/mcp/callback"


class ToolOut(BaseModel):
    name: str = Field(description="As a message's `tools` names it (`mcp:<server>`: its tools).")
    connection: Literal["none", "connected", "not_connected"] = Field(
        description="For an MCP server that acts as the user: whether they connected it."
    )


class ToolList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ToolOut]


class Connect(BaseModel):
    authorization_url: str = Field(description="Where to send the user's browser next.")


def toolbox_of(svc: Services) -> Toolbox:
    if svc.toolbox is None:
        raise Unavailable("this process has no tools")
    return svc.toolbox


def oauth_of(svc: Services) -> McpOAuth:
    return toolbox_of(svc).mcp.oauth


@router.get("", response_model=ToolList, responses=errors(*AUTHED, 503))
async def list_tools(who: PrincipalDep, svc: ServicesDep) -> ToolList:
    """The tools the user's tier allows, and which MCP servers they have connected."""
    user = await svc.accounts.me(who)
    oauth = oauth_of(svc)
    connected = set(await oauth.connected(who.user_id))
    out = []
    for name in svc.settings.qos.tier(user.tier).tools:
        server = name[len(PREFIX) :] if name.startswith(PREFIX) else None
        state: Literal["none", "connected", "not_connected"] = "none"
        if server is not None and oauth.needs_user(server):
            state = "connected" if server in connected else "not_connected"
        out.append(ToolOut(name=name, connection=state))
    return ToolList(data=out)


@router.post("/mcp/{server}/connect", response_model=Connect, responses=errors(*AUTHED, 404, 503))
async def connect(server: str, request: Request, who: PrincipalDep, svc: ServicesDep) -> Connect:
    """Begin connecting an MCP server that acts as the user (OAuth 2.1 with PKCE):
    404 ``no_such_server`` for a server that is not one; 503 ``mcp_oauth_failed`` when it
    or its authorization server does not answer as OAuth says."""
    url = await oauth_of(svc).begin(who.user_id, server, redirect_uri(svc, request))
    return Connect(authorization_url=url)


@router.get(
    "/mcp/callback",
    status_code=status.HTTP_303_SEE_OTHER,
    response_class=RedirectResponse,
    responses={**errors(*AUTHED, 503), 303: {"description": "Back to the app."}},
)
async def callback(
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    state: Annotated[str, Query(max_length=4000)] = "",
    code: Annotated[str, Query(max_length=4000)] = "",
    iss: Annotated[str | None, Query(max_length=2000)] = None,
    error: Annotated[str | None, Query(max_length=200)] = None,
) -> RedirectResponse:
    """Where the authorization server sends the browser back: the code traded for the
    user's tokens, then back to the app (``/?connected=<server>``, or ``/?connect_error=…``
    saying why not: refused, an altered, expired or another user's ``state``)."""
    if error is not None or not code:
        return back_to_app(connect_error=f"the authorization server refused: {error or 'no code'}")
    try:
        server = await oauth_of(svc).finish(who.user_id, state, code, iss)
    except ParleyError as e:
        return back_to_app(connect_error=str(e))
    toolbox_of(svc).mcp.forget_user(server, who.user_id)
    return back_to_app(connected=server)


@router.delete(
    "/mcp/{server}/connection",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=errors(*AUTHED, 404, 503),
)
async def disconnect(server: str, who: PrincipalDep, svc: ServicesDep) -> None:
    """Forget the user's tokens for the server (404 ``not_connected`` if there are none)."""
    await oauth_of(svc).disconnect(who.user_id, server)
    toolbox_of(svc).mcp.forget_user(server, who.user_id)


def redirect_uri(svc: Services, request: Request) -> str:
    return callback_url(svc, request, CALLBACK)
