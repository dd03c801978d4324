"""The bus's load per model, on both buses: runs in flight against engine slots, admission
by a load limit (atomic under concurrency), the drain rate, and expiries."""

from __future__ import annotations

import asyncio

from parley.bus.interface import Bus, HeldRun
from tests.waiting import eventually

WINDOW = 30.0


async def test_no_slots_said_means_unknown_load_and_every_run_admitted(bus: Bus) -> None:
    admitted = await bus.admit_run("m", "r1", max_load=0.5, ttl=30, window=WINDOW)
    assert admitted.admitted
    load = await bus.model_load("m", window=WINDOW)
    assert (load.in_flight, load.slots, load.load) == (1, 0, 0.0)


async def test_slots_are_summed_over_sources_and_lapse(bus: Bus) -> None:
    await bus.offer_capacity("m", "w1", 4, ttl=30)
    await bus.offer_capacity("m", "w2", 6, ttl=0.2)
    await bus.offer_capacity("m", "w1", 5, ttl=30)  # a source's new offer replaces its old one
    await bus.offer_capacity("other", "w1", 100, ttl=30)
    assert (await bus.model_load("m", window=WINDOW)).slots == 11

    async def lapsed() -> bool:
        return (await bus.model_load("m", window=WINDOW)).slots == 5

    await eventually(lapsed, "w2's offer to lapse")


async def test_admission_is_exact_under_concurrency(bus: Bus) -> None:
    """10 slots, limit 0.8: of 100 runs asking at once exactly 8 are counted in."""
    await bus.offer_capacity("m", "w1", 10, ttl=30)
    answers = await asyncio.gather(
        *(bus.admit_run("m", f"r{i}", max_load=0.8, ttl=30, window=WINDOW) for i in range(100))
    )
    assert sum(a.admitted for a in answers) == 8
    load = await bus.model_load("m", window=WINDOW)
    assert (load.in_flight, load.load) == (8, 0.8)
    winner = next(f"r{i}" for i, a in enumerate(answers) if a.admitted)
    refreshed = await bus.admit_run("m", winner, max_load=0.8, ttl=30, window=WINDOW)
    assert refreshed.admitted  # a run counted in already is refreshed, whatever the load
    unlimited = await bus.admit_run("m", "top", max_load=None, ttl=30, window=WINDOW)
    assert unlimited.admitted and unlimited.load.in_flight == 8
    assert (await bus.model_load("m", window=WINDOW)).in_flight == 9


async def test_ended_runs_make_the_drain_rate_and_runs_never_made_do_not(bus: Bus) -> None:
    await bus.offer_capacity("m", "w1", 4, ttl=30)
    for i in range(4):
        await bus.admit_run("m", f"r{i}", max_load=None, ttl=30, window=WINDOW)
    for i in range(3):
        await bus.release_run("m", f"r{i}", drained=True)
    await bus.release_run("m", "r3", drained=False)  # never made: not a drain
    await bus.release_run("m", "r0", drained=True)  # released twice: counted once
    await bus.release_run("m", "ghost", drained=True)  # never counted in: no drain
    load = await bus.model_load("m", window=WINDOW)
    assert (load.in_flight, load.drained) == (0, 3)
    assert 0 <= load.span < 1.0  # the oldest ended just now: the rate is over 1 s at least
    assert load.drain_rate == 3.0
    assert (await bus.admit_run("m", "r9", max_load=0.25, ttl=30, window=WINDOW)).admitted


async def test_drain_counts_only_the_window_and_spans_from_its_oldest_end(bus: Bus) -> None:
    await bus.admit_run("m", "r1", max_load=None, ttl=30, window=WINDOW)
    await bus.release_run("m", "r1", drained=True)
    await asyncio.sleep(1.3)
    assert (await bus.model_load("m", window=0.2)).drained == 0
    load = await bus.model_load("m", window=WINDOW)
    assert load.drained == 1 and 1.25 <= load.span < 5
    assert load.drain_rate == 1 / load.span  # one run in the time since it ended


async def test_runs_in_flight_lapse_when_not_refreshed(bus: Bus) -> None:
    await bus.offer_capacity("m", "w1", 1, ttl=30)
    assert (await bus.admit_run("m", "r1", max_load=1.0, ttl=0.2, window=WINDOW)).admitted
    assert not (await bus.admit_run("m", "r2", max_load=1.0, ttl=30, window=WINDOW)).admitted

    async def lapsed() -> bool:
        answer = await bus.admit_run("m", "r2", max_load=1.0, ttl=30, window=WINDOW)
        return answer.admitted

    await eventually(lapsed, "r1 to lapse")
    assert (await bus.model_load("m", window=WINDOW)).drained == 0  # a lapse is no drain


async def test_a_refresh_extends_a_counted_run_and_never_counts_one_in(bus: Bus) -> None:
    await bus.offer_capacity("m", "w1", 1, ttl=30)
    assert not await bus.refresh_run("m", "r1", ttl=30)  # not counted: stays out
    assert (await bus.model_load("m", window=WINDOW)).in_flight == 0
    assert (await bus.admit_run("m", "r1", max_load=None, ttl=0.3, window=WINDOW)).admitted
    assert await bus.refresh_run("m", "r1", ttl=30)
    await asyncio.sleep(0.5)  # past the first ttl: the refresh holds it
    assert (await bus.model_load("m", window=WINDOW)).in_flight == 1
    await bus.release_run("m", "r1", drained=True)
    assert not await bus.refresh_run("m", "r1", ttl=30)  # ended: a late refresh is a no-op
    assert (await bus.model_load("m", window=WINDOW)).in_flight == 0


async def test_a_renewal_of_held_runs_extends_what_is_counted_and_nothing_else(
    bus: Bus,
) -> None:
    """One ``refresh_held`` for every run a worker holds: each still counted (its user slot
    and its model count) outlives its first ttl; one released, or never counted, stays out."""
    assert await bus.hold_user_run("u1", "k1", limit=1, ttl=0.3)
    assert (await bus.admit_run("m", "r1", max_load=None, ttl=0.3, window=WINDOW)).admitted
    assert await bus.hold_user_run("u2", "r2", limit=1, ttl=30)
    assert (await bus.admit_run("m2", "r2", max_load=None, ttl=30, window=WINDOW)).admitted
    await bus.release_user_run("u2", "r2")  # r2 ended: a late renewal must not revive it
    await bus.release_run("m2", "r2", drained=True)
    held = [HeldRun("u1", "k1", "m", "r1"), HeldRun("u2", "r2", "m2", "r2")]
    held.append(HeldRun("u3", "r3", "m", "r3"))  # never counted
    await bus.refresh_held(held, ttl=30)
    await asyncio.sleep(0.5)  # past r1's first ttl: the renewal holds it
    assert (await bus.model_load("m", window=WINDOW)).in_flight == 1
    assert not await bus.hold_user_run("u1", "k9", limit=1, ttl=30)  # k1 still holds u1's
    assert (await bus.model_load("m2", window=WINDOW)).in_flight == 0
    assert await bus.hold_user_run("u2", "x", limit=1, ttl=30)  # r2's slot stayed free
    assert await bus.hold_user_run("u3", "x", limit=1, ttl=30)
    await bus.refresh_held([], ttl=30)  # nothing held: nothing asked
