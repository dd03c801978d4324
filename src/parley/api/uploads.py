"""Large request bodies (uploads, imports), read only once the request is authenticated,
and work on them that ends when the client goes away.

``BodyLimit`` (``limits.py``) passes these bodies through unread, counting them: a route
reads one after its dependencies have authenticated the caller and checked the object, so an
anonymous request is answered (401) from its headers, never after its body. ``spooled``
writes a body to a temporary file as it arrives (memory stays flat whatever its size);
``while_connected`` runs the parsing of it and cancels that the moment the client
disconnects (the parsing process is killed: ``parsing/pool.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from fastapi import Request

from parley.errors import InvalidRequest

T = TypeVar("T")


class ClientGone(InvalidRequest):
    """The client disconnected while its request was being worked on (nobody reads this)."""

    code = "client_disconnected"


@contextlib.asynccontextmanager
async def spooled(request: Request) -> AsyncIterator[str]:
    """The request's body in a temporary file (its path), deleted afterwards."""
    fd, path = tempfile.mkstemp(prefix="parley-upload-")
    try:
        with os.fdopen(fd, "wb") as file:
            async for chunk in request.stream():
                file.write(chunk)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.asynccontextmanager
async def spooled_aside(path: str) -> AsyncIterator[str]:
    """``path`` for a file the work writes beside the body's, deleted afterwards."""
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client disconnects first: then ``work`` is cancelled.
    Call it once the body has been read (it listens for the disconnect on ``receive``)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if task.cancelled() or not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone("the client disconnected before its file was read")
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
