"""The login throttle's schedule, on a controlled clock."""

from __future__ import annotations

from parley.accounts.throttle import MemoryLoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock) -> MemoryLoginThrottle:
    return MemoryLoginThrottle(free_failures=3, window=60, max_delay=8, clock=clock)


def test_free_failures_then_doubling_delays_up_to_the_cap() -> None:
    clock = Clock()
    t = make(clock)
    for _ in range(3):
        assert t.retry_after(["a"]) is None
        t.failed(["a"])
    waits = []
    for _ in range(6):
        wait = t.retry_after(["a"])
        assert wait is not None
        waits.append(wait)
        clock.now += wait
        assert t.retry_after(["a"]) is None
        t.failed(["a"])
    assert waits == [1, 2, 4, 8, 8, 8]


def test_keys_are_independent_and_the_longest_wait_wins() -> None:
    clock = Clock()
    t = make(clock)
    for _ in range(4):
        t.failed(["a", "ip"])
    assert t.retry_after(["b"]) is None
    assert t.retry_after(["a"]) == 2
    t.failed(["ip"])
    assert t.retry_after(["b", "ip"]) == 4


def test_success_clears_and_quiet_time_forgets() -> None:
    clock = Clock()
    t = make(clock)
    for _ in range(5):
        t.failed(["a", "b"])
    t.succeeded("a")
    assert t.retry_after(["a"]) is None
    assert t.retry_after(["b"]) is not None
    clock.now += 61
    assert t.retry_after(["b"]) is None
    t.failed(["b"])
    assert t.retry_after(["b"]) is None  # counting starts again
