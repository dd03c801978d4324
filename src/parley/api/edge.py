"""The outermost layer of the app, on every HTTP response.

* A request id (``X-Request-Id``) on every response. An unhandled exception is answered
  here with a 500 in the error shape that names the request id, which the log line carries
  too; the exception goes no further, so the server keeps the connection (Starlette's own
  handler re-raises after answering, and uvicorn then drops the keep-alive connection).
  An exception after the response has started cannot be answered: it is logged, and the
  server closes the connection, the only way to tell the client the body is cut.
* ``Cache-Control: no-store`` on everything under ``/api`` and ``/v1``: those answers
  depend on the caller (the login body holds the session token, /api/me the email).
* Redirects are relative: a ``Location`` never names the request's ``Host`` header (but
  for one a route marks as off-site with ``OFFSITE``: to an identity provider, which it
  built from settings, never from the request).
* Every log line of the request carries its request id, and the trace id of a valid W3C
  ``traceparent`` header (``parley.logs``), or of the request's span when tracing is on.
* A server span per request when tracing is on (``parley.observability.tracing``).
"""

from __future__ import annotations

import logging
import secrets
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley import logs
from parley.api.error_responses import parley_error_response
from parley.errors import ParleyError
from parley.observability import tracing

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
PRIVATE_PREFIXES = ("/api", "/v1")
_Headers = list[tuple[bytes, bytes]]


class Edge:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = secrets.token_hex(8)
        private = is_private(str(scope.get("path", "")))
        started = False

        async def send_at_edge(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                exchange.respond(int(message.get("status", 200)))
                message["headers"] = edge_headers(message, request_id, private=private)
            await send(message)

        with (
            tracing.server_span(scope) as exchange,
            logs.bind(request_id=request_id, trace_id=tracing.trace_id() or trace_id(scope)),
        ):
            try:
                await self.app(scope, receive, send_at_edge)
            except Exception as exc:
                tracing.record_error(exc)
                log.error(
                    "unhandled error (request id %s) in %s %s%s",
                    request_id,
                    scope.get("method"),
                    str(scope.get("path", ""))[:200],
                    " after the response started: connection closed" if started else "",
                    exc_info=exc,
                )
                if not started:
                    response = parley_error_response(internal_error(request_id))
                    await response(scope, receive, send_at_edge)


def trace_id(scope: Scope) -> str | None:
    """The trace id of the request's ``traceparent`` header; None if it has none, a
    malformed one, or more than one."""
    values = [value for name, value in scope.get("headers", []) if name.lower() == b"traceparent"]
    return logs.trace_id_of(values[0].decode("latin-1")) if len(values) == 1 else None


def internal_error(request_id: str) -> ParleyError:
    return ParleyError(f"internal server error (request id {request_id})")


def is_private(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PRIVATE_PREFIXES)


def edge_headers(message: Message, request_id: str, *, private: bool) -> _Headers:
    given = message.get("headers", [])
    offsite = any(name.lower() == OFFSITE_HEADER for name, _ in given)
    headers: _Headers = [
        (name, value)
        for name, value in given
        if not (private and name.lower() == b"cache-control") and name.lower() != OFFSITE_HEADER
    ]
    if private:
        headers.append((b"cache-control", b"no-store"))
    if 300 <= int(message.get("status", 200)) < 400 and not offsite:
        headers = [
            (name, relative(value) if name.lower() == b"location" else value)
            for name, value in headers
        ]
    headers.append((REQUEST_ID_HEADER.lower().encode(), request_id.encode()))
    return headers


# a route's mark on a redirect to another site (taken off at the edge)
OFFSITE_HEADER = b"x-parley-offsite"
OFFSITE = {OFFSITE_HEADER.decode(): "1"}


def relative(location: bytes) -> bytes:
    """``Location`` as a path on this server: scheme and host (taken from the request's
    ``Host`` header by whoever built it) dropped, and never ``//host`` (which a browser
    would take for another host)."""
    parts = urlsplit(location.decode("latin-1"))
    path = "/" + parts.path.lstrip("/\\")
    return (path + (f"?{parts.query}" if parts.query else "")).encode("latin-1")
