"""What the bus's tasks on connections of their own share (the stream tail, the stop watch):
a step run again and again, with a backoff after each failure, and stopping such tasks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from redis.exceptions import RedisError

_RETRY_MIN_SECONDS = 0.1
_RETRY_MAX_SECONDS = 2.0

log = logging.getLogger(__name__)


async def keep_stepping(
    step: Callable[[], Awaitable[None]],
    *,
    what: str,
    running: Callable[[], bool],
    after_failure: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """``step`` again and again while ``running()``; after a failure (logged, with its
    traceback if it is not Redis's or the network's), ``after_failure`` and a pause that
    doubles up to ``_RETRY_MAX_SECONDS`` until a step succeeds."""
    pause = _RETRY_MIN_SECONDS
    while running():
        try:
            await step()
            pause = _RETRY_MIN_SECONDS
        except Exception as exc:
            unexpected = not isinstance(exc, RedisError | OSError)
            log.warning("%s: %s; again in %.1f s", what, exc, pause, exc_info=unexpected)
            if after_failure is not None:
                await after_failure()
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_MAX_SECONDS)


async def cancel_until_done(tasks: Iterable[asyncio.Task[None] | None]) -> None:
    """Cancel the tasks until they are done: again and again, since on Python 3.11 redis-py's
    ``asyncio.wait_for`` around a socket write can swallow a cancellation that lands just as
    the write completes."""
    left = {t for t in tasks if t is not None}
    while left := {t for t in left if not t.done()}:
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=0.1)
