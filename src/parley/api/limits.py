"""Request body limit, enforced before any route reads the body."""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.error_responses import error_body
from parley.errors import PayloadTooLarge


class BodyLimit:
    """Answers 413 for bodies over ``max_bytes`` (or a route's own limit in ``larger``:
    imports take files; or in ``matching``, by a pattern of paths with ids in them:
    attachments), declared or streamed (chunked).

    A body of the usual limit is read here, whole, before the route runs. A body of a route
    with a limit of its own is not: it is declared (``Content-Length`` over the limit: 413
    at once) and passed on unread, counted as the route reads it (past the limit, reading
    raises ``PayloadTooLarge``), so that the route authenticates the caller before it reads
    a byte (``uploads.py``)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        larger: dict[str, int] | None = None,
        matching: list[tuple[re.Pattern[str], int]] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger or {}
        self.matching = matching or []

    def limit(self, path: str) -> int:
        return self._limit(path)[0]

    def _limit(self, path: str) -> tuple[int, bool]:
        """The path's limit, and whether its route reads the body itself (streamed)."""
        for pattern, limit in self.matching:
            if pattern.fullmatch(path):
                return limit, True
        if path in self.larger:
            return self.larger[path], True
        return self.max_bytes, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, streamed = self._limit(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._reject(send, limit)
            return
        if streamed:
            await self.app(scope, _counted(receive, limit), send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self._reject(send, limit)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        await self.app(scope, _replay_body(b"".join(chunks), receive), send)

    async def _reject(self, send: Send, limit: int) -> None:
        error = PayloadTooLarge(f"the request body exceeds {limit} bytes")
        body = json.dumps(error_body(error)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": error.status_code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _counted(receive: Receive, limit: int) -> Receive:
    """``receive``, raising ``PayloadTooLarge`` once the body read passes ``limit``."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
        return message

    return counted


def _replay(messages: list[Message]) -> Receive:
    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return receive


def _replay_body(body: bytes, downstream: Receive) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await downstream()

    return receive
