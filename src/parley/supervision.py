"""The process's long-lived work, watched: a task that dies is logged, seen by health and
restarted; an engine that fails for good, or a task that keeps dying, ends the process.

Every background loop of a process (the worker's claim loop, the sweeper, the export
maintenance, the archive pass, the metrics sampler) runs under ``Supervisor.keep``: if it
raises, or returns while the process is not closing, the error is logged, the task is
``restarting`` (``/readyz`` says not ready) and it starts again after a backoff. More than
``max_restarts`` deaths within ``window_seconds`` and it is ``failed``: ``fatal`` is set,
``/healthz`` answers 503, and the process's entry point (``parley.cli``) stops the server
and exits non-zero, so that its supervisor (systemd, Kubernetes, compose) starts a fresh
one. The engine is watched the same way (``watch_engine``): it restarts itself after a
failure (``engines/builtin/loop.py``); ``failed`` means it could not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from parley.engines.interface import Engine, EngineState

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
WINDOW_SECONDS = 60.0
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0
ENGINE_CHECK_SECONDS = 1.0

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


class TaskState(StrEnum):
    RUNNING = "running"
    RESTARTING = "restarting"
    FAILED = "failed"


@dataclass(slots=True)
class Watched:
    name: str
    factory: TaskFactory
    state: TaskState = TaskState.RUNNING
    deaths: list[float] = field(default_factory=list)  # monotonic times, within the window
    last_error: str | None = None
    task: asyncio.Task[None] | None = None


class Supervisor:
    def __init__(
        self,
        *,
        max_restarts: int = MAX_RESTARTS,
        window_seconds: float = WINDOW_SECONDS,
        first_backoff: float = FIRST_BACKOFF_SECONDS,
    ) -> None:
        self.max_restarts = max_restarts
        self.window_seconds = window_seconds
        self.first_backoff = first_backoff
        self.watched: dict[str, Watched] = {}
        self.fatal = asyncio.Event()
        self.reason: str | None = None
        self._closing = False

    def keep(self, name: str, factory: TaskFactory) -> None:
        """Run ``factory()`` as a task kept alive under ``name``."""
        watched = self.watched[name] = Watched(name, factory)
        watched.task = asyncio.create_task(self._keep(watched), name=name)

    def watch_engine(self, engine: Engine, interval: float = ENGINE_CHECK_SECONDS) -> None:
        """Fatal once ``engine`` says it failed for good."""

        async def check() -> None:
            while engine.state() is not EngineState.FAILED:  # noqa: ASYNC110 (another thread's)
                await asyncio.sleep(interval)
            self.fail("the engine failed and could not restart")

        self.keep("engine-watch", check)

    def failing(self) -> str | None:
        """Why the process cannot go on (None: it can)."""
        return self.reason if self.fatal.is_set() else None

    def fail(self, reason: str) -> None:
        """The process cannot go on: say why, once, and set ``fatal``."""
        if not self.fatal.is_set():
            log.critical("the process cannot go on: %s", reason)
            self.reason = reason
            self.fatal.set()

    def problems(self) -> dict[str, str]:
        """Each task that is not running, and why (for readiness)."""
        return {
            w.name: f"{w.state.value}: {w.last_error}"
            for w in self.watched.values()
            if w.state is not TaskState.RUNNING
        }

    def stopping(self) -> None:
        """The process is closing: a task that returns now has been stopped, not died."""
        self._closing = True

    async def close(self) -> None:
        self._closing = True
        tasks = [w.task for w in self.watched.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.watched.clear()

    async def _keep(self, watched: Watched) -> None:
        backoff = self.first_backoff
        while True:
            try:
                await watched.factory()
                if self._closing:
                    return
                error = f"{watched.name} returned while the process was running"
                log.error("background task %s", error)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("background task %s died", watched.name)
            if not self._died(watched, error):
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            watched.state = TaskState.RUNNING
            log.warning("background task %s restarted", watched.name)

    def _died(self, watched: Watched, error: str) -> bool:
        """Count a death; False (and fatal) past the restarts the window allows."""
        now = time.monotonic()
        watched.deaths = [t for t in watched.deaths if now - t < self.window_seconds] + [now]
        watched.last_error = error
        if len(watched.deaths) > self.max_restarts:
            watched.state = TaskState.FAILED
            self.fail(f"{watched.name} died {len(watched.deaths)} times: {error}")
            return False
        watched.state = TaskState.RESTARTING
        return True
