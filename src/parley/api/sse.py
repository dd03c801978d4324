"""Server-sent event streams, their body written straight to the server.

An event stream's start (status and headers) goes through every middleware as any response
does: request id, security headers, no-store, HSTS, the trace's status. Its body, an SSE
frame per batch for as long as the run lasts, goes to the server's own ``send``, kept in the
request's scope by the app (``ServerSendKept``): each middleware wraps ``send`` for the
response's start alone, and passing each of a thousand streams' tokens through all of those
wrappers cost the api a visible share of its CPU per token (``docs/SERVICE_PROFILE.md``).
Without the kept ``send`` (the app called by another host) it goes through them as usual.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

SERVER_SEND = "parley.server_send"


class ServerSendKept(FastAPI):
    """The app, keeping the server's ``send`` in each request's scope for event streams."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SERVER_SEND] = send
        await super().__call__(scope, receive, send)


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response whose body is written to the server's ``send``."""

    media_type = "text/event-stream"
    _server_send: Send | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._server_send = scope.get(SERVER_SEND)
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})  # through the middlewares
        write = self._server_send or send
        async for chunk in self.body_iterator:
            body = chunk if isinstance(chunk, bytes) else str(chunk).encode(self.charset)
            await write({"type": "http.response.body", "body": body, "more_body": True})
        await write({"type": "http.response.body", "body": b"", "more_body": False})
