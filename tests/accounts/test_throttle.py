"""The account throttles' schedule (``accounts/throttle.py``), on the in-process bus with a
controlled clock; tests/api/test_throttles.py drives them over HTTP on both buses."""

from __future__ import annotations

from typing import Any

import pytest

from parley.accounts.throttle import AccountThrottles
from parley.bus.memory import MemoryBus
from parley.config import load_settings
from parley.errors import RateLimited


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def make(clock: Clock, **settings: Any) -> AccountThrottles:
    base = {
        "login_free_failures": 3,
        "login_max_delay_seconds": 8,
        "login_failure_window_seconds": 60,
        "login_email_free_failures": 5,
        "login_email_max_delay_seconds": 2,
        "signup_free_attempts_per_address": 2,
        "signup_window_seconds": 100,
    }
    return AccountThrottles(
        MemoryBus(clock=clock), load_settings(**{**base, **settings}).accounts, sleep=clock.sleep
    )


async def _refused_for(t: AccountThrottles, email: str, address: str) -> float:
    with pytest.raises(RateLimited) as caught:
        await t.before_password_check(email, address)
    assert caught.value.code == "too_many_login_attempts"
    assert caught.value.retry_after is not None
    return caught.value.retry_after


async def test_a_pair_gets_free_attempts_then_doubling_waits_up_to_the_cap() -> None:
    clock = Clock()
    t = make(clock, login_email_free_failures=100)
    for _ in range(3):
        await t.before_password_check("ada@example.com", "a")
    waits = []
    for _ in range(6):
        wait = await _refused_for(t, "ada@example.com", "a")
        waits.append(wait)
        clock.now += wait
        await t.before_password_check("ada@example.com", "a")
    assert waits == [1, 2, 4, 8, 8, 8]
    # another address, or another email from this one, starts afresh
    await t.before_password_check("ada@example.com", "b")
    await t.before_password_check("bob@example.com", "a")


async def test_the_email_is_slowed_never_refused_and_a_success_forgets() -> None:
    clock = Clock()
    t = make(clock)
    for n in range(5):  # five addresses, one attempt each: the email's free ones
        await t.before_password_check("ada@example.com", f"10.0.0.{n}")
    assert clock.slept == []
    await t.before_password_check("ADA@example.com", "owner")  # held 1 s, then let through
    await t.before_password_check("ada@example.com", "owner")  # 2 s after that one
    await t.before_password_check("ada@example.com", "owner")  # capped at 2 s
    assert clock.slept == [1, 2, 2]
    await t.password_ok("ada@example.com", "owner")
    await t.before_password_check("ada@example.com", "owner")
    assert clock.slept == [1, 2, 2]  # forgotten: no wait


async def test_quiet_time_forgets_a_pair() -> None:
    clock = Clock()
    t = make(clock)
    for _ in range(3):
        await t.before_password_check("ada@example.com", "a")
    await _refused_for(t, "ada@example.com", "a")
    clock.now += 61
    for _ in range(3):
        await t.before_password_check("ada@example.com", "a")


async def test_sign_ups_per_address() -> None:
    clock = Clock()
    t = make(clock)
    await t.before_signup("a")
    await t.before_signup("a")
    with pytest.raises(RateLimited) as caught:
        await t.before_signup("a")
    assert caught.value.code == "too_many_signups"
    assert caught.value.retry_after == 1
    await t.before_signup("b")
    await t.before_signup(None)  # no address known: one shared allowance
    clock.now += 101
    await t.before_signup("a")
