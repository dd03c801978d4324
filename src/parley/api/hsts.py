"""Strict-Transport-Security, when parley is reached over https (``public_url``).

Browsers then refuse plain http to this host (and its subdomains) for a year, so a network
attacker cannot strip TLS from a later visit. Sent on every response; a browser heeds it
only over https, and parley behind a TLS-terminating proxy cannot tell how the browser
connected, which is why the public URL decides.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.settings import HttpSettings

HSTS = "max-age=31536000; includeSubDomains"


class StrictTransportSecurity:
    def __init__(self, app: ASGIApp, *, value: str = HSTS) -> None:
        self.app = app
        self.header = (b"strict-transport-security", value.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        await self.app(scope, receive, send_with_header)


def install_hsts(app: FastAPI, settings: HttpSettings) -> None:
    """Add the header to every response when the public URL is https; else nothing. Call it
    last in ``create_app``, so the middleware is the outermost (errors of the others too)."""
    if settings.https:
        app.add_middleware(StrictTransportSecurity)
