"""Round trips through another site (an identity provider, an MCP server's authorization
server): the address it sends the browser back to, and the way back into the app."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import Request, status
from fastapi.responses import RedirectResponse

from parley.services import Services


def callback_url(svc: Services, request: Request, path: str) -> str:
    """``path`` on this server as the browser reaches it (``http.public_url`` where set)."""
    public = svc.settings.http.public_url
    base = public.rstrip("/") if public else str(request.base_url).rstrip("/")
    return f"{base}{path}"


def back_to_app(**query: str) -> RedirectResponse:
    """303 to the app, with what it should tell the user in the query."""
    return RedirectResponse(f"/?{urlencode(query)}", status_code=status.HTTP_303_SEE_OTHER)
