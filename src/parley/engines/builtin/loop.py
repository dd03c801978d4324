"""The engine thread: an EngineCore stepped on its own thread, fed typed commands.

Other threads (the asyncio side) never touch the core: they put ``Add``, ``Abort`` and
``Stop`` on a queue, and the loop applies them between steps, in order, matched by type.
It steps while the scheduler has work and blocks on the queue while it has none, so the
event loop never waits on a forward pass; each busy period's steps run on a thread of their
own (``threads.py``). Every step's ``TokenEvent``s go to ``emit`` (called on the thread that
stepped). Aborting a sequence the core does not hold (never added, or already
finished) does nothing and emits nothing.

No request can stop the loop for the others. A sequence the core cannot take (``add``
raises: a parameter out of range) fails alone with ``EngineRefusedRequest``. Any other error
in the loop (a step, an abort, the thread itself) fails every sequence the core holds with
``EngineFailed``, resets the core (fresh scheduler, block tables and generators; the model
and its KV cache's memory are kept) and goes on: ``state`` is ``restarting`` meanwhile.
More than ``MAX_RESTARTS`` failures within ``RESTART_WINDOW_SECONDS``, or a reset that
itself fails, leave it ``failed`` for good: from then on every request fails at once, and
the process's supervisor (``parley.supervision``) ends the process.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.sequence import Sequence
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import (
    EngineFailed,
    EngineRefusedRequest,
    EngineState,
    FinishReason,
)

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Add:
    """Schedule a new sequence."""

    seq: Sequence


@dataclass(frozen=True, slots=True)
class Abort:
    """End a sequence now (its blocks freed) with an ``abort`` event, if it is still live."""

    seq: Sequence


@dataclass(frozen=True, slots=True)
class Stop:
    """End the loop; commands after it are not applied."""


Command = Add | Abort | Stop


class EngineLoop:
    """Runs an EngineCore on its own thread; other threads submit and abort."""

    def __init__(self, core: EngineCore, emit: Callable[[list[TokenEvent]], None]) -> None:
        self.core = core
        self._emit = emit
        self._commands: queue.Queue[Command] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="parley-engine", daemon=True)
        self.state = EngineState.READY
        self.failures: list[float] = []  # monotonic times of the loop's failures
        self.last_failure: str | None = None

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def send(self, command: Command) -> None:
        """Queue a command for the engine thread (thread-safe, never blocks)."""
        self._commands.put(command)

    def submit(self, seq: Sequence) -> None:
        self.send(Add(seq))

    def abort(self, seq: Sequence) -> None:
        self.send(Abort(seq))

    def stop(self) -> None:
        self.send(Stop())
        self._thread.join(timeout=30)

    def _run(self) -> None:
        """Serve until ``Stop``; after a failure, recover and serve again (or, failed for
        good, refuse every request until ``Stop``)."""
        while True:
            try:
                if self.state is EngineState.FAILED:
                    self._refuse_all()
                    return
                if not self._serve():
                    return
            except Exception as exc:
                log.exception("the engine loop failed; failing its requests and restarting")
                self._recover(exc)

    def _serve(self) -> bool:
        """Wait for commands while idle; step each busy period (from a command that brings
        work to the step that leaves none) on a thread of its own that ends with it, so that
        an idle engine holds no OpenMP pool to throttle another thread's (``threads.py``).
        False on ``Stop``."""
        while self._drain(block=True):
            busy = self.core.scheduler.has_work
            if busy and not on_fresh_thread(self._busy, name="parley-engine-steps"):
                return False
        return False

    def _busy(self) -> bool:
        """Step until no work is left, applying commands between steps; False on ``Stop``."""
        torch.set_grad_enabled(False)
        while self.core.scheduler.has_work:
            events = self.core.step()
            if events:
                self._emit(events)
            if not self._drain(block=False):
                return False
        return True

    def _drain(self, block: bool) -> bool:
        """Apply the queued commands, waiting for one if ``block``; False on ``Stop``."""
        try:
            command = self._commands.get(block=block)
        except queue.Empty:
            return True
        while True:
            if not self._apply(command):
                return False
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, command: Command) -> bool:
        match command:
            case Add(seq):
                self._add(seq)
            case Abort(seq):
                if self._live(seq):
                    self.core.abort(seq)
                    self._emit([TokenEvent(seq, None, FinishReason.ABORT)])
            case Stop():
                return False
        return True

    def _add(self, seq: Sequence) -> None:
        """The sequence scheduled, or failed alone if the core cannot take it."""
        try:
            self.core.add(seq)
        except Exception as exc:
            log.warning("the engine refused sequence %s: %r", seq.seq_id, exc)
            if self._live(seq):
                self.core.abort(seq)
            refused = EngineRefusedRequest(f"the engine cannot take this request: {exc}")
            self._emit([TokenEvent(seq, None, FinishReason.ABORT, refused)])

    def _live(self, seq: Sequence) -> bool:
        """Whether the core holds ``seq`` (added and not finished)."""
        sched = self.core.scheduler
        return any(s is seq for s in sched.running) or any(s is seq for s in sched.waiting)

    # -- failures ------------------------------------------------------------------------------

    def _recover(self, exc: Exception) -> None:
        """Fail what the core held, reset it, and count the failure: too many in the window,
        or a reset that fails, and the engine is failed for good."""
        self.state = EngineState.RESTARTING
        now = time.monotonic()
        self.failures = [t for t in self.failures if now - t < RESTART_WINDOW_SECONDS] + [now]
        self.last_failure = f"{type(exc).__name__}: {exc}"
        held = self._held()
        failed = EngineFailed(f"the engine failed ({type(exc).__name__}) and is restarting")
        self._emit_safely([TokenEvent(seq, None, FinishReason.ABORT, failed) for seq in held])
        if len(self.failures) > MAX_RESTARTS:
            log.error(
                "the engine failed %d times within %.0f s: giving up",
                len(self.failures),
                RESTART_WINDOW_SECONDS,
            )
            self.state = EngineState.FAILED
            return
        try:
            self.core.reset()
        except Exception:
            log.exception("the engine could not be reset: giving up")
            self.state = EngineState.FAILED
            return
        self.state = EngineState.READY
        log.warning(
            "the engine restarted after a failure (%d in the last %.0f s)",
            len(self.failures),
            RESTART_WINDOW_SECONDS,
        )

    def _held(self) -> list[Sequence]:
        """The sequences the core holds, whatever state a failure left it in."""
        try:
            sched = self.core.scheduler
            return list(dict.fromkeys([*sched.running, *sched.waiting]))
        except Exception:  # (a scheduler broken past reading: nothing to name)
            return []

    def _refuse_all(self) -> None:
        """Failed for good: every request added fails at once, until ``Stop``."""
        gone = EngineFailed("the engine failed and could not restart")
        while True:
            command = self._commands.get()
            match command:
                case Add(seq):
                    self._emit_safely([TokenEvent(seq, None, FinishReason.ABORT, gone)])
                case Stop():
                    return
                case _:
                    pass

    def _emit_safely(self, events: list[TokenEvent]) -> None:
        if not events:
            return
        try:
            self._emit(events)
        except Exception:  # (the event loop gone: nobody is waiting)
            log.exception("could not deliver the engine's failure events")
