"""The web UI: static files from the package, the same page for every app URL.

No build step and nothing from a CDN: ``parley/web`` holds plain HTML, CSS and
JavaScript modules. Every page is served with a strict Content-Security-Policy so
that even a bug in the renderer cannot run injected script.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


def web_root() -> Path:
    return Path(str(resources.files("parley") / "web"))


def mount_web(app: FastAPI) -> None:
    """Serve the UI at ``/`` (and ``/c/{chat_id}``), the admin console at ``/admin``, their
    assets under ``/static``."""
    root = web_root()
    index = root / "index.html"
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    @router.get("/c/{chat_id}")
    async def page() -> FileResponse:
        return FileResponse(index, headers=PAGE_HEADERS)

    @router.get("/admin")
    async def admin_page() -> FileResponse:  # (its data needs an admin's or auditor's session)
        return FileResponse(root / "admin.html", headers=PAGE_HEADERS)

    @router.get("/account")
    async def account_page() -> FileResponse:  # password, sessions, API keys
        return FileResponse(root / "account.html", headers=PAGE_HEADERS)

    app.include_router(router)
    app.mount("/static", StaticFiles(directory=root), name="static")


class SecurityHeaders:
    """``nosniff`` on every response; the page's policy on static files too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                if static:
                    headers.append((b"content-security-policy", CSP.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
