"""The worker: takes runs by priority, generates, streams deltas, honours cancel, ends runs
through the ``Finisher``, guarded by this worker still holding the run (docs/RUNS.md).

Every append carries the run's attempt as a fencing token: once the sweeper took the run
back, the bus refuses this worker's appends; a worker that wakes late stops and gives up its
lease at once. One asyncio task per run, at most ``concurrency``, each holding a renewed
lease on its row; cancel is watched beside generation (a stop frees the engine slot even
before the first token). A run's task binds its ids to the log context (``parley.logs``):
a line when it starts and one when it ends (ids, counts, status; never the conversation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from datetime import timedelta
from functools import partial

from parley import logs
from parley.bus.interface import Bus, QueuedRun, QueueFull, RunEvent, StaleAttempt
from parley.domain import BACKGROUND_PRIORITY, RunStatus, new_id
from parley.engines.interface import ChatMessage, Engine, GenerationRequest
from parley.engines.registry import capacity_offers
from parley.engines.settings import EngineSettings
from parley.observability import tracing
from parley.observability.metrics import Metrics
from parley.observability.token_timing import UNTIMED
from parley.outages import log_failure
from parley.qos.admission import Admission
from parley.qos.settings import QosSettings
from parley.runs.events import delta_events
from parley.runs.finisher import Finisher, Guard
from parley.runs.generation import Prompt, Prompting
from parley.runs.moderated import OutputRefused, moderated
from parley.runs.progress import Progress, storable_delta
from parley.runs.run_slots import RunSlots
from parley.runs.settings import RunSettings
from parley.runs.tool_rounds import ToolRounds
from parley.safety.moderator import Moderator
from parley.store import run_ends, run_records
from parley.store.database import Database
from parley.store.schema import Run

log = logging.getLogger(__name__)

RESERVE_POLL_SECONDS = 0.05


class Worker:
    def __init__(
        self,
        db: Database,
        bus: Bus,
        engine: Engine,
        finisher: Finisher,
        settings: RunSettings,
        *,
        qos: QosSettings,
        engines: EngineSettings,
        admission: Admission,
        prompting: Prompting,
        concurrency: int,
        worker_id: str | None = None,
        metrics: Metrics | None = None,
        moderator: Moderator | None = None,
        tool_rounds: ToolRounds | None = None,
    ) -> None:
        self._moderator, self._tool_rounds = moderator, tool_rounds
        self._db, self._bus, self._engine = db, bus, engine
        self._settings = settings
        self._top_priority, self._engines = qos.top_priority, engines
        self._finisher = finisher
        self._metrics = metrics
        self._admission = admission
        self._prompting = prompting
        self._concurrency = concurrency
        self._slots = RunSlots(concurrency)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[2:10]}"
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[str, Progress] = {}
        self._finishing: dict[str, Run] = {}  # ends being stored: their leases still held
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def free_slots(self) -> int:
        """Slots free for a run now (0: nothing more is claimed until one frees)."""
        return self._slots.free

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self._settings.lease_seconds)

    async def run_forever(self) -> None:
        """Take and execute runs until stop() is called. If the claim loop or the lease
        renewer dies, the other is stopped too and the error raised: the process's
        supervisor logs it and starts this again (``parley.supervision``)."""
        self._loop_task = asyncio.current_task()
        renewer = asyncio.create_task(self._keep_leases(), name="leases")
        taking = asyncio.create_task(self._take_runs(), name="claims")
        try:
            done, _ = await asyncio.wait({renewer, taking}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.cancelled() and not self._stopping.is_set():
                    raise RuntimeError(f"the worker's {task.get_name()} task was cancelled")
                task.result()
        finally:
            taking.cancel()
            await asyncio.gather(taking, return_exceptions=True)
            if self._tasks:
                await asyncio.wait(set(self._tasks))  # stop() has bounded them
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _take_runs(self) -> None:
        while not self._stopping.is_set():
            await self._slots.take()
            reserved = self._in_reserve(self._slots.free + 1)
            try:
                # in the reserve, look for a top-tier run briefly, then look again: a slot
                # freed meanwhile lets any run in
                item = await self._bus.dequeue(
                    timeout=RESERVE_POLL_SECONDS if reserved else 1.0,
                    min_priority=self._top_priority if reserved else BACKGROUND_PRIORITY,
                )
            except Exception as e:
                self._slots.give_back()
                log_failure(log, e, "dequeue failed; retrying")
                await asyncio.sleep(1.0)
                continue
            if item is None or not await self._fits(item):
                self._slots.give_back()
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
        with logs.bind(run_id=item.run_id):
            try:
                claimed = await self._claim(item.run_id)
                if claimed is not None:
                    run, prompt = claimed
                    with (
                        logs.bind(user_id=run.user_id, trace_id=logs.trace_id_of(run.traceparent)),
                        tracing.executing(run),
                    ):
                        await self._generate(run, prompt)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run %s failed in the worker", item.run_id)
            finally:
                self._slots.give_back()

    async def _fits(self, item: QueuedRun) -> bool:
        """Whether the run dequeued may take the slot held for it: a lower tier's run that
        was waited for outside the reserve, while top-tier runs were handed the slots it
        would leave, goes back to the queue (at the back of its tier's runs)."""
        if item.priority >= self._top_priority or not self._in_reserve(self._slots.free + 1):
            return True
        with contextlib.suppress(QueueFull):  # else the sweeper queues it again
            await self._bus.enqueue(item)
        return False

    def _in_reserve(self, free: int) -> bool:
        """Whether a slot taken with ``free`` slots free is one of the top tier's reserve."""
        return free <= self._settings.reserved_slots

    def take(self, priority: int) -> str | None:
        """A slot taken now for a run made already claimed by this worker (``Handoff``); a
        lower tier's run never takes one of the top tier's reserve."""
        if self._stopping.is_set() or self._slots.free == 0:
            return None
        if priority < self._top_priority and self._in_reserve(self._slots.free):
            return None
        return self.worker_id if self._slots.try_take() else None

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return self._engine.count_prompt_tokens(model, messages)

    def give_back(self) -> None:
        self._slots.give_back()

    def start(self, run: Run) -> None:
        """Generate a run made claimed by this worker, in the slot ``take`` held for it."""
        task = asyncio.create_task(self._execute_claimed(run))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute_claimed(self, run: Run) -> None:
        trace_id = logs.trace_id_of(run.traceparent)
        with logs.bind(run_id=run.id, user_id=run.user_id, trace_id=trace_id):
            try:
                prompt = await self._prompting.prepare(run)
                with tracing.executing(run):
                    await self._generate(run, prompt)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run %s failed in the worker", run.id)
            finally:
                self._slots.give_back()

    async def _claim(self, run_id: str) -> tuple[Run, Prompt] | None:
        """Take the run (None if another worker has it or it ended), then its prompt, whose
        length is stored with it, so whoever ends the run can charge it."""
        async with self._db.alone() as conn:
            run = await run_records.claim(
                conn, run_id=run_id, worker_id=self.worker_id, lease=self.lease
            )
        if run is None:
            return None
        return run, await self._prompting.prepare(run)

    async def _generate(self, run: Run, prompt: Prompt) -> None:
        progress = Progress(run)
        self._active[run.id] = progress
        if self._metrics is not None:
            self._metrics.run_started(run)
        log.info("run %s started (attempt %d, model %s)", run.id, run.attempts, run.model)
        watcher = asyncio.create_task(self._watch_cancel(run, progress))
        try:
            if prompt.refusal is not None:
                progress.error = prompt.refusal
            elif await self._append(run, progress.begun(prompt.prefix), progress):
                await self._answer(run, prompt.request, progress)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            progress.error = e
            said = "moderation stopped" if isinstance(e, OutputRefused) else "the engine failed on"
            log.warning("%s run %s: %r", said, run.id, e)
        finally:
            self._active.pop(run.id, None)
            progress.over = True
            watcher.cancel()
        try:
            self._prompting.ended(run, prompt, await self._end(run, progress))
        finally:
            # after the end, not before: redis-py can swallow a cancellation that lands as a
            # command completes, and the watcher then runs on to its next timeout
            await asyncio.gather(watcher, return_exceptions=True)

    async def _end(self, run: Run, progress: Progress) -> Run | None:
        """The run ended by this worker (None: given up, or ended elsewhere)."""
        if progress.lease_lost:
            await self._give_up(run)
            return None
        guard = Guard(RunStatus.RUNNING, worker_id=self.worker_id)
        outcome = progress.outcome(run.prompt_tokens)
        self._finishing[run.id] = run  # its lease is renewed while the end is retried
        try:
            alone = run_ends.ends_alone(run)
            ended = await self._finisher.finish_retrying(run.id, outcome, guard, alone=alone)
        finally:
            self._finishing.pop(run.id, None)
        if ended is None:
            log.warning("run %s ended elsewhere before this worker settled it", run.id)
            return None
        log.info(
            "run %s ended with %s (finish reason %s, %s prompt + %s completion tokens%s)",
            run.id,
            ended.status.value,
            ended.finish_reason,
            ended.prompt_tokens,
            ended.completion_tokens,
            f", error {ended.error_code}" if ended.error_code else "",
        )
        return ended

    async def _answer(self, run: Run, request: GenerationRequest, progress: Progress) -> None:
        """One model step, or as many as a chat's server tools take (``tool_rounds.py``)."""
        rounds = self._tool_rounds
        if rounds is None or not (tools := await rounds.tools_of(run)):
            return await self._stream(run, request, progress)
        step, append = partial(self._stream, run), partial(self._append, run)
        await rounds.answer(run, request, progress, tools, step, append)

    async def _stream(self, run: Run, request: GenerationRequest, progress: Progress) -> None:
        if progress.cancelled or await self._bus.cancel_requested(run.id):
            progress.cancelled = True  # stopped before the engine saw it
            return
        stream = tracing.generation(
            self._engine.stream(request),
            model=request.model,
            max_tokens=request.max_tokens,
            prompt_tokens=run.prompt_tokens,
        )
        # nothing reaches the stream before the tier's output classifiers approve it
        stream = moderated(self._moderator, run, request, stream, self._engine.abort)
        timer = self._metrics.token_timer(run) if self._metrics else UNTIMED  # TTFT, ITL
        try:
            async for generated in stream:
                timer.see(generated)
                delta = progress.numbered(storable_delta(generated))  # as streamed and stored
                if not await self._append(run, delta_events(delta), progress):
                    break
                progress.take(delta)
                if progress.stopped:
                    break
        finally:
            timer.close()
            await stream.aclose()  # type: ignore[attr-defined]

    async def _append(
        self, run: Run, events: RunEvent | list[RunEvent], progress: Progress
    ) -> bool:
        """Append under this attempt's fence; False (and the run given up) if it is stale."""
        try:  # (the run's id and attempt as ``progress`` read them once)
            for event in events if isinstance(events, list) else [events]:
                await self._bus.append(progress.run_id, event, fence=progress.fence)
        except StaleAttempt:
            log.warning("run %s: attempt %d is stale; stopping", run.id, run.attempts)
            await self._lose(run.id, progress)
            return False
        return True

    async def _lose(self, run_id: str, progress: Progress) -> None:
        if not progress.lease_lost:
            progress.stop(lease_lost=True)
            await self._engine.abort(run_id)

    async def _give_up(self, run: Run) -> None:
        """Let go of a run the sweeper is taking back: its lease lapses now."""
        log.warning("run %s: lease lost to the sweeper; leaving it", run.id)
        async with self._db.transaction() as s:
            await run_records.release_lease(s, run_id=run.id, worker_id=self.worker_id)

    async def _watch_cancel(self, run: Run, progress: Progress) -> None:
        """Watch for a stop; first, beside the generation (not before it), make the run's
        slot last one lease from now (renewed with the lease: ``_keep_leases``)."""
        await self._refresh_held([run])
        run_id = run.id
        wait = self._settings.lease_seconds
        while not progress.over:
            if await self._bus.wait_cancel(run_id, timeout=wait) and not progress.over:
                progress.stop()
                await self._engine.abort(run_id)
                return

    async def _keep_leases(self) -> None:
        """Renew all of this worker's leases at once, a third of a lease apart; with them
        its runs' slots, and its engine's offer of slots for the models' load. A run whose
        end is still being stored (the database failing over) keeps its lease too, so the
        sweeper never takes back an answer that only waits for the database."""
        while True:
            await self._offer_capacity()
            await asyncio.sleep(self._settings.lease_seconds / 3)
            if self._active or self._finishing:
                await self.renew_leases()
                held = [p.run for p in self._active.values()] + list(self._finishing.values())
                await self._refresh_held(held)

    async def _offer_capacity(self) -> None:
        offers = capacity_offers(self._engines, self.worker_id, self._concurrency)
        try:
            for offer in offers:
                await self._bus.offer_capacity(
                    offer.model, offer.source, offer.slots, ttl=self._settings.lease_seconds
                )
        except Exception as e:
            log_failure(log, e, "offering the engine's slots failed; retrying")

    async def _refresh_held(self, runs: list[Run]) -> None:
        try:
            await self._admission.still_running(runs)
        except Exception as e:
            log_failure(log, e, "refreshing the run slots of %d runs failed", len(runs))

    async def renew_leases(self) -> None:
        """One renewal of every lease this worker holds; a run whose lease was not renewed
        has been taken back (by the sweeper) and is given up. Only runs that were active
        before the renewal began are judged by it: one claimed while it ran is not in its
        result, yet it is this worker's (its claim committed after the renewal's UPDATE)."""
        before = dict(self._active)
        try:
            async with self._db.transaction() as s:
                held = await run_records.renew_leases(s, worker_id=self.worker_id, lease=self.lease)
        except Exception as e:
            log_failure(log, e, "lease renewal failed; retrying")
            return
        for run_id, progress in before.items():
            if run_id not in held and self._active.get(run_id) is progress:
                await self._lose(run_id, progress)
