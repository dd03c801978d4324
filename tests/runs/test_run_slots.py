"""A worker's run slots: taken at once or waited for, given back to the first waiter."""

from __future__ import annotations

import asyncio

import pytest

from parley.runs.run_slots import RunSlots


async def test_slots_are_taken_until_none_is_free_and_given_back_to_a_waiter_first() -> None:
    slots = RunSlots(2)
    assert slots.try_take() and slots.try_take()
    assert slots.free == 0 and not slots.try_take()
    waiting = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    assert not waiting.done()
    slots.give_back()  # straight to the waiter: never free for a try_take meanwhile
    assert slots.free == 0 and not slots.try_take()
    await waiting
    slots.give_back()
    slots.give_back()
    assert slots.free == 2


async def test_a_waiter_cancelled_takes_no_slot_and_loses_none() -> None:
    slots = RunSlots(1)
    await slots.take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    slots.give_back()
    await second  # the slot went past the cancelled waiter
    slots.give_back()
    assert slots.free == 1


async def test_a_slot_given_back_twice_is_a_bug_said_at_once() -> None:
    slots = RunSlots(1)
    with pytest.raises(RuntimeError, match="never taken"):
        slots.give_back()
