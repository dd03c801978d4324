"""The engine thread: an EngineCore stepped on its own thread, fed typed commands.

Other threads (the asyncio side) never touch the core: they put ``Add``, ``Abort`` and
``Stop`` on a queue, and the loop applies them between steps, in order, matched by type.
It steps while the scheduler has work and blocks on the queue while it has none, so the
event loop never waits on a forward pass; each busy period's steps run on a thread of their
own (``threads.py``). Every step's ``TokenEvent``s go to ``emit`` (called on the thread that
stepped). Aborting a sequence the core does not hold (never added, or already
finished) does nothing and emits nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.sequence import Sequence
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import FinishReason

log = logging.getLogger(__name__)


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

    def start(self) -> None:
        self._thread.start()

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
        """Wait for commands while idle; step each busy period (from a command that brings
        work to the step that leaves none) on a thread of its own that ends with it, so that
        an idle engine holds no OpenMP pool to throttle another thread's (``threads.py``)."""
        while self._drain(block=True):
            busy = self.core.scheduler.has_work
            if busy and not on_fresh_thread(self._busy, name="parley-engine-steps"):
                return

    def _busy(self) -> bool:
        """Step until no work is left, applying commands between steps; False on ``Stop``."""
        torch.set_grad_enabled(False)
        while self.core.scheduler.has_work:
            try:
                events = self.core.step()
            except Exception:
                log.exception("engine step failed; ending the sequences in it")
                events = self._fail_all()
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
                self.core.add(seq)
            case Abort(seq):
                if self._live(seq):
                    self.core.abort(seq)
                    self._emit([TokenEvent(seq, None, FinishReason.ABORT)])
            case Stop():
                return False
        return True

    def _live(self, seq: Sequence) -> bool:
        """Whether the core holds ``seq`` (added and not finished)."""
        sched = self.core.scheduler
        return any(s is seq for s in sched.running) or any(s is seq for s in sched.waiting)

    def _fail_all(self) -> list[TokenEvent]:
        sched = self.core.scheduler
        events = []
        for seq in list(sched.running) + list(sched.waiting):
            self.core.abort(seq)
            events.append(TokenEvent(seq, None, FinishReason.ABORT))
        return events
