"""The engine thread and its typed commands, on a tiny random model."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import pytest

from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.loop import MAX_RESTARTS, Abort, Add, EngineLoop, Stop
from parley.engines.builtin.sequence import SeqStatus, Sequence, SequenceSampling
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import (
    EngineFailed,
    EngineRefusedRequest,
    EngineState,
    FinishReason,
)
from tests.engines.tiny import tiny_model

TIMEOUT = 60


class Recorder:
    """The events a loop emits (on its thread), and a wait for a sequence's last one."""

    def __init__(self) -> None:
        self.events: list[TokenEvent] = []
        self._lock = threading.Lock()
        self._finished: dict[str, threading.Event] = {}

    def __call__(self, events: list[TokenEvent]) -> None:
        with self._lock:
            self.events += events
        for event in events:
            if event.finish is not None:
                self._done(event.seq.seq_id).set()

    def _done(self, seq_id: str) -> threading.Event:
        with self._lock:
            return self._finished.setdefault(seq_id, threading.Event())

    def wait(self, seq_id: str) -> None:
        assert self._done(seq_id).wait(TIMEOUT), f"{seq_id} did not finish"

    def of(self, seq_id: str) -> list[TokenEvent]:
        with self._lock:
            return [e for e in self.events if e.seq.seq_id == seq_id]


def engine_loop() -> tuple[EngineLoop, Recorder]:
    recorder = Recorder()
    return EngineLoop(EngineCore(tiny_model(), num_blocks=64, block_size=4), recorder), recorder


def seq(name: str, max_tokens: int = 4) -> Sequence:
    return Sequence(name, list(range(3, 12)), SequenceSampling(max_tokens=max_tokens))


def test_commands_are_frozen_values() -> None:
    s = seq("a")
    assert Add(s) == Add(s) and Abort(s) == Abort(s) and Stop() == Stop()
    assert Add(s) != Add(seq("a"))  # sequences compare by identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        Add(s).seq = seq("b")  # type: ignore[misc]


def test_a_sequence_runs_to_its_length() -> None:
    loop, recorder = engine_loop()
    loop.start()
    loop.send(Add(a := seq("a", max_tokens=4)))
    recorder.wait("a")
    loop.stop()
    events = recorder.of("a")
    assert [e.token is not None for e in events] == [True] * 4
    assert events[-1].finish is FinishReason.LENGTH
    assert a.output == [e.token for e in events]
    assert loop.core.blocks.usage == 0.0


def test_aborting_an_unknown_or_finished_sequence_does_nothing() -> None:
    loop, recorder = engine_loop()
    loop.start()
    never_added = seq("ghost")
    loop.send(Abort(never_added))
    loop.send(Add(seq("a", max_tokens=3)))
    recorder.wait("a")
    finished = recorder.of("a")[-1].seq
    loop.send(Abort(finished))
    loop.send(Abort(finished))
    loop.stop()  # after the aborts: commands are applied in order
    assert recorder.of("ghost") == []
    assert never_added.status is SeqStatus.WAITING  # untouched
    assert [e.finish for e in recorder.of("a")] == [None, None, FinishReason.LENGTH]
    assert finished.status is SeqStatus.FINISHED


def test_aborting_a_live_sequence_ends_it_once_and_frees_its_blocks() -> None:
    loop, recorder = engine_loop()
    a = seq("a", max_tokens=10_000)
    loop.send(Add(a))  # queued before the thread starts: applied in order
    loop.send(Abort(a))
    loop.send(Abort(a))
    loop.start()
    recorder.wait("a")
    loop.stop()
    events = recorder.of("a")
    assert [(e.token, e.finish) for e in events] == [(None, FinishReason.ABORT)]
    assert a.status is SeqStatus.FINISHED
    assert not loop.core.scheduler.has_work
    assert loop.core.blocks.usage == 0.0


def test_stop_ends_the_thread_and_later_commands_are_not_applied() -> None:
    loop, recorder = engine_loop()
    loop.send(Stop())
    loop.send(Add(seq("late")))
    loop.start()
    loop.stop()
    assert recorder.events == []
    assert not loop.core.scheduler.has_work


def test_each_busy_period_steps_on_a_thread_that_ends_with_it() -> None:
    """An idle engine keeps no stepping thread (nor the OpenMP pool it made: threads.py);
    the next request steps on a new one."""
    loop, recorder = engine_loop()
    stepped_on: list[threading.Thread] = []

    def record(events: list[TokenEvent]) -> None:
        stepped_on.append(threading.current_thread())
        recorder(events)

    loop._emit = record
    loop.start()
    try:
        loop.submit(seq("a"))
        recorder.wait("a")
        first = stepped_on[-1]
        first.join(TIMEOUT)  # the busy period is over: its thread ends
        assert not first.is_alive() and first.name == "parley-engine-steps"
        loop.submit(seq("b"))
        recorder.wait("b")
        assert stepped_on[-1] is not first
        assert [e.token for e in recorder.of("b") if e.token is not None]
    finally:
        loop.stop()
    assert not loop._thread.is_alive()


def test_on_fresh_thread_returns_the_result_or_raises_the_error() -> None:
    def where() -> str:
        return threading.current_thread().name

    assert on_fresh_thread(where, name="t-x") == "t-x"
    with pytest.raises(ZeroDivisionError):
        on_fresh_thread(lambda: 1 / 0)


# -- failures: no request stops the loop for the others (issue 39) ------------------------------


def _wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_a_sequence_the_core_cannot_take_fails_alone() -> None:
    """A seed torch cannot take (2**64) fails that request with a clear error; the one
    running beside it and the next one are served as if nothing happened."""
    loop, recorder = engine_loop()
    loop.start()
    try:
        loop.submit(a := seq("a", max_tokens=40))
        bad = Sequence("bad", list(range(3, 12)), SequenceSampling(max_tokens=4, seed=2**64))
        loop.submit(bad)
        loop.submit(seq("c", max_tokens=3))
        for name in ("a", "bad", "c"):
            recorder.wait(name)
    finally:
        loop.stop()
    (refused,) = recorder.of("bad")
    assert isinstance(refused.error, EngineRefusedRequest), refused
    assert str(refused.error).startswith("the engine cannot take this request")
    assert [e.error for e in recorder.of("a")] == [None] * 40
    assert recorder.of("a")[-1].finish is FinishReason.LENGTH and len(a.output) == 40
    assert recorder.of("c")[-1].finish is FinishReason.LENGTH
    assert (loop.state, loop.failures) == (EngineState.READY, [])


def test_a_step_that_raises_fails_the_sequences_in_it_and_the_loop_restarts() -> None:
    loop, recorder = engine_loop()
    step = loop.core.step
    calls = 0

    def failing_third_step() -> list[TokenEvent]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("a kernel fault")
        return step()

    loop.core.step = failing_third_step  # type: ignore[method-assign]
    loop.start()
    try:
        loop.submit(seq("a", max_tokens=1000))
        loop.submit(seq("b", max_tokens=1000))
        recorder.wait("a")
        recorder.wait("b")
        loop.submit(seq("c", max_tokens=3))
        recorder.wait("c")
    finally:
        loop.stop()
    for name in ("a", "b"):
        last = recorder.of(name)[-1]
        assert isinstance(last.error, EngineFailed), last
        assert "restarting" in str(last.error)
    assert recorder.of("c")[-1].finish is FinishReason.LENGTH
    assert [e.error for e in recorder.of("c")] == [None] * 3
    assert loop.state is EngineState.READY and len(loop.failures) == 1
    assert loop.last_failure == "RuntimeError: a kernel fault"


def test_a_failure_while_idle_does_not_end_the_thread() -> None:
    """The probe's crash: an error applying a command between steps ended the thread and
    every later request hung. Now the loop recovers and serves the next one."""
    loop, recorder = engine_loop()
    loop.core.abort = _raises  # type: ignore[method-assign,assignment]
    loop.send(Add(a := seq("a", max_tokens=10_000)))
    loop.send(Abort(a))
    loop.start()
    try:
        recorder.wait("a")
        loop.submit(seq("b", max_tokens=3))
        recorder.wait("b")
    finally:
        loop.stop()
    assert isinstance(recorder.of("a")[-1].error, EngineFailed)
    assert recorder.of("b")[-1].finish is FinishReason.LENGTH
    assert loop.state is EngineState.READY


def _raises(*_: object) -> None:
    raise RuntimeError("broken")


def test_an_engine_that_keeps_failing_is_failed_for_good_and_refuses_at_once() -> None:
    loop, recorder = engine_loop()
    loop.core.step = _raises  # type: ignore[method-assign,assignment]
    loop.start()
    try:
        for i in range(MAX_RESTARTS + 1):
            loop.submit(seq(f"s{i}"))
            recorder.wait(f"s{i}")
        _wait_for("the engine to give up", lambda: loop.state is EngineState.FAILED)
        loop.submit(seq("late"))
        recorder.wait("late")
    finally:
        loop.stop()
    assert not loop.alive  # Stop still ends it
    (late,) = recorder.of("late")
    assert isinstance(late.error, EngineFailed) and "could not restart" in str(late.error)


def test_a_reset_that_fails_leaves_the_engine_failed() -> None:
    loop, recorder = engine_loop()
    loop.core.step = _raises  # type: ignore[method-assign,assignment]
    loop.core.reset = _raises  # type: ignore[method-assign]
    loop.start()
    try:
        loop.submit(seq("a"))
        recorder.wait("a")
        _wait_for("the engine to give up", lambda: loop.state is EngineState.FAILED)
    finally:
        loop.stop()
    assert isinstance(recorder.of("a")[-1].error, EngineFailed)
