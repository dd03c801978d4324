"""Run inputs (a temporary chat's conversation, kept only on the bus), on the in-process bus
and on Redis: kept per run, exactly as given, until forgotten or its TTL lapses."""

from __future__ import annotations

from parley.bus.interface import Bus
from tests.waiting import eventually

TEXT = '{"messages":[{"role":"user","content":"héron \\u2014 🐦"}]}'


async def test_an_input_is_kept_per_run_until_forgotten(bus: Bus) -> None:
    assert await bus.run_input("run_a") is None
    await bus.keep_input("run_a", TEXT, ttl=60)
    await bus.keep_input("run_b", "other", ttl=60)
    assert await bus.run_input("run_a") == TEXT
    assert await bus.run_input("run_a") == TEXT  # read again (a retried attempt reads it too)
    await bus.forget_input("run_a")
    assert await bus.run_input("run_a") is None
    assert await bus.run_input("run_b") == "other"
    await bus.forget_input("run_never")  # nothing to forget: no error


async def test_an_input_lapses_with_its_ttl(bus: Bus) -> None:
    await bus.keep_input("run_a", TEXT, ttl=0.2)
    await bus.keep_input("run_b", TEXT, ttl=60)

    async def lapsed() -> bool:
        return await bus.run_input("run_a") is None

    await eventually(lapsed, "the input to lapse", timeout=5)
    assert await bus.run_input("run_b") == TEXT
