"""The worker: takes runs by priority, generates, streams deltas, honours cancel, ends runs.

A run ends through the ``Finisher`` (stored state, settled budget, terminal events), guarded
by this worker still holding the run.

One asyncio task per run, at most ``concurrency`` at once. Each run holds a lease
on its row, renewed while it works; the sweeper recovers runs whose lease lapses.
Cancel is watched concurrently with generation, so a stop frees the engine slot
even while the engine is still before its first token.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from parley.bus.interface import Bus, QueuedRun
from parley.config import Settings
from parley.domain import RunStatus, new_id
from parley.engines.interface import ChatMessage, Engine, FinishReason, GenerationRequest
from parley.runs.events import delta_event, status_event
from parley.runs.finisher import Finisher, Guard
from parley.store import run_records
from parley.store.database import Database
from parley.store.schema import Message, Run

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Progress:
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int | None = None
    finish: FinishReason | None = None
    cancelled: bool = False
    lease_lost: bool = False


class Worker:
    def __init__(
        self,
        db: Database,
        bus: Bus,
        engine: Engine,
        finisher: Finisher,
        settings: Settings,
        *,
        concurrency: int,
        worker_id: str | None = None,
    ) -> None:
        self._db = db
        self._bus = bus
        self._engine = engine
        self._settings = settings
        self._finisher = finisher
        self._slots = asyncio.Semaphore(concurrency)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[2:10]}"
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[str, _Progress] = {}
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self._settings.lease_seconds)

    async def run_forever(self) -> None:
        """Take and execute runs until stop() is called."""
        self._loop_task = asyncio.current_task()
        renewer = asyncio.create_task(self._keep_leases(), name="leases")
        try:
            await self._take_runs()
        finally:
            if self._tasks:
                await asyncio.wait(set(self._tasks))  # stop() has bounded them
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _take_runs(self) -> None:
        while not self._stopping.is_set():
            await self._slots.acquire()
            try:
                item = await self._bus.dequeue(timeout=1.0)
            except Exception:
                self._slots.release()
                log.exception("dequeue failed; retrying")
                await asyncio.sleep(1.0)
                continue
            if item is None:
                self._slots.release()
                continue
            task = asyncio.create_task(self._execute(item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking runs; let running ones finish for ``grace`` s; the sweeper has the rest."""
        self._stopping.set()
        if self._loop_task is not None and self._loop_task is not asyncio.current_task():
            # a run popped in the instant of cancelling is re-queued by the sweeper
            self._loop_task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _execute(self, item: QueuedRun) -> None:
        try:
            async with self._db.transaction() as s:
                run = await run_records.claim(
                    s, run_id=item.run_id, worker_id=self.worker_id, lease=self.lease
                )
                history = await run_records.history(s, run) if run else []
            if run is not None:
                await self._generate(run, history)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("run %s failed in the worker", item.run_id)
        finally:
            self._slots.release()

    async def _generate(self, run: Run, history: list[Message]) -> None:
        await self._bus.append(run.id, status_event(run.id, RunStatus.RUNNING))
        progress = _Progress()
        request = GenerationRequest(
            request_id=run.id,
            model=run.model,
            messages=[ChatMessage(m.role.value, m.content) for m in history],
            max_tokens=run.max_tokens,
            temperature=run.temperature,
            priority=run.priority,
        )
        if await self._bus.cancel_requested(run.id):
            progress.cancelled = True
            await self._settle(run, progress)
            return
        watcher = asyncio.create_task(self._watch_cancel(run.id, progress))
        self._active[run.id] = progress
        error: Exception | None = None
        try:
            await self._stream(run, request, progress)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            error = e
            log.exception("engine failed on run %s", run.id)
        finally:
            self._active.pop(run.id, None)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if progress.lease_lost:
            log.warning("run %s: lease lost to the sweeper; leaving it", run.id)
            return
        await self._settle(run, progress, error)

    async def _stream(self, run: Run, request: GenerationRequest, progress: _Progress) -> None:
        stream = self._engine.stream(request)
        try:
            async for delta in stream:
                if delta.prompt_tokens is not None:
                    progress.prompt_tokens = delta.prompt_tokens
                if delta.finish_reason is not None:
                    progress.finish = delta.finish_reason
                if delta.text or delta.tokens:
                    progress.text.append(delta.text)
                    progress.tokens += delta.tokens
                    await self._bus.append(run.id, delta_event(delta.text, delta.tokens))
                if progress.cancelled or progress.lease_lost:
                    break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def _watch_cancel(self, run_id: str, progress: _Progress) -> None:
        while not await self._bus.wait_cancel(run_id, timeout=self._settings.lease_seconds):
            pass
        progress.cancelled = True
        await self._engine.abort(run_id)

    async def _keep_leases(self) -> None:
        """Renew all of this worker's leases at once, a third of a lease apart."""
        while True:
            await asyncio.sleep(self._settings.lease_seconds / 3)
            if not self._active:
                continue
            try:
                async with self._db.transaction() as s:
                    held = await run_records.renew_leases(
                        s, worker_id=self.worker_id, lease=self.lease
                    )
            except Exception:
                log.exception("lease renewal failed; retrying")
                continue
            for run_id, progress in list(self._active.items()):
                if run_id not in held and not progress.lease_lost:
                    progress.lease_lost = True
                    await self._engine.abort(run_id)

    async def _settle(self, run: Run, progress: _Progress, error: Exception | None = None) -> None:
        text = "".join(progress.text)
        if progress.cancelled:
            status, finish, code, message = RunStatus.CANCELLED, "cancelled", None, None
        elif error is not None:
            status, finish = RunStatus.FAILED, "error"
            code, message = "engine_error", f"the engine failed: {type(error).__name__}"
        else:
            status, code, message = RunStatus.COMPLETED, None, None
            finish = (progress.finish or FinishReason.STOP).value
        outcome = run_records.Outcome(
            status, text, progress.prompt_tokens, progress.tokens, finish, code, message
        )
        guard = Guard(RunStatus.RUNNING, worker_id=self.worker_id)
        if await self._finisher.finish(run.id, outcome, guard) is None:
            log.warning("run %s ended elsewhere before this worker settled it", run.id)
