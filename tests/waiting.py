"""Waiting for a condition, with a deadline: the one way tests wait.

A test never sleeps to let something happen; it polls the condition it needs and, when the
deadline passes, fails saying what it was waiting for and what it last saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0


class GaveUp(AssertionError):
    """The condition did not hold before the deadline."""


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.02,
) -> T:
    """Poll ``check`` until it returns something truthy; that value. Fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise GaveUp(f"gave up after {timeout:g} s waiting for {what}; last saw {last!r}")
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T | None],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
) -> T:
    """``eventually`` for code outside an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise GaveUp(f"gave up after {timeout:g} s waiting for {what}; last saw {last!r}")
        time.sleep(interval)
