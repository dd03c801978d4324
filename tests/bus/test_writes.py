"""Write marks (read-your-writes with replicas), on the in-process bus and on Redis: a mark
lasts its TTL, a shorter later mark never cuts a longer one short, and marks are per user."""

from __future__ import annotations

from parley.bus.interface import Bus
from tests.waiting import eventually


async def test_a_write_mark_lasts_its_ttl_per_user(bus: Bus) -> None:
    assert not await bus.wrote_recently("ada")
    await bus.mark_write("ada", ttl=0.4)
    assert await bus.wrote_recently("ada")
    assert not await bus.wrote_recently("bob")

    async def lapsed() -> bool:
        return not await bus.wrote_recently("ada")

    await eventually(lapsed, "the mark to lapse", timeout=5)


async def test_a_shorter_mark_never_shortens_a_longer_one(bus: Bus) -> None:
    await bus.mark_write("ada", ttl=30)
    await bus.mark_write("ada", ttl=0.05)
    await bus.mark_write("bob", ttl=0.05)  # the short mark alone: it lapses

    async def short_lapsed() -> bool:
        return not await bus.wrote_recently("bob")

    await eventually(short_lapsed, "a 50 ms mark to lapse", timeout=5)
    assert await bus.wrote_recently("ada")
