"""One behaviour suite for every Bus implementation."""

from __future__ import annotations

import asyncio
import time

import pytest

from parley.bus.interface import (
    Bus,
    BusLimits,
    EventKind,
    QueuedRun,
    QueueFull,
    RunEvent,
    StaleAttempt,
    valid_entry_id,
)
from tests.builders import make_bus


async def test_queue_orders_by_priority_then_age(bus: Bus) -> None:
    await bus.enqueue(QueuedRun("a", priority=0))
    await bus.enqueue(QueuedRun("b", priority=2))
    await bus.enqueue(QueuedRun("c", priority=0))
    await bus.enqueue(QueuedRun("d", priority=2))
    await bus.enqueue(QueuedRun("e", priority=1))
    assert await bus.queue_depth() == {0: 2, 1: 1, 2: 2}
    got = [await bus.dequeue(timeout=1) for _ in range(5)]
    assert [g.run_id for g in got if g] == ["b", "d", "e", "a", "c"]
    assert [g.priority for g in got if g] == [2, 2, 1, 0, 0]
    assert await bus.dequeue(timeout=0.05) is None
    assert await bus.queue_depth() == {}


async def test_queue_is_bounded_and_idempotent_per_run(bus: Bus) -> None:
    for i in range(5):
        await bus.enqueue(QueuedRun(f"r{i}"))
    await bus.enqueue(QueuedRun("r0"))  # already queued: no error, no duplicate
    with pytest.raises(QueueFull) as info:
        await bus.enqueue(QueuedRun("r5"))
    assert info.value.status_code == 503
    seen = []
    while (item := await bus.dequeue(timeout=0.05)) is not None:
        seen.append(item.run_id)
    assert seen == [f"r{i}" for i in range(5)]


async def test_queue_length_counts_queued_runs_of_every_priority(bus: Bus) -> None:
    assert await bus.queue_length() == 0
    await bus.enqueue(QueuedRun("a", priority=0))
    await bus.enqueue(QueuedRun("b", priority=3))
    await bus.enqueue(QueuedRun("c", priority=1))
    assert await bus.queue_length() == 3
    await bus.enqueue(QueuedRun("b", priority=3))  # already queued: counted once
    await bus.enqueue(QueuedRun("a", priority=2))  # ... whatever the priority
    assert await bus.queue_length() == 3
    got = await bus.dequeue(timeout=1)
    assert got is not None
    assert got.run_id == "b"
    assert await bus.queue_length() == 2
    assert await bus.remove("a") is True
    assert await bus.queue_length() == 1
    assert await bus.remove("a") is False
    assert await bus.queue_length() == 1
    for i in range(4):
        await bus.enqueue(QueuedRun(f"r{i}", priority=i))
    assert await bus.queue_length() == 5
    with pytest.raises(QueueFull):
        await bus.enqueue(QueuedRun("r5"))
    assert await bus.queue_length() == 5
    while await bus.dequeue(timeout=0.05) is not None:
        pass
    assert await bus.queue_length() == 0


async def test_queue_depth_counts_the_lowest_and_highest_priorities(bus: Bus) -> None:
    for run_id, priority in [("a", 0), ("b", 1000), ("c", 999), ("d", 1), ("e", 0)]:
        await bus.enqueue(QueuedRun(run_id, priority=priority))
    assert await bus.queue_depth() == {1000: 1, 999: 1, 1: 1, 0: 2}
    assert await bus.remove("b") is True
    assert await bus.remove("d") is True
    assert await bus.queue_depth() == {999: 1, 0: 2}
    assert await bus.queue_length() == 3


async def test_dequeue_waits_for_work_and_remove_takes_runs_out(bus: Bus) -> None:
    async def later() -> None:
        await asyncio.sleep(0.1)
        await bus.enqueue(QueuedRun("x"))

    task = asyncio.create_task(later())
    start = time.monotonic()
    got = await bus.dequeue(timeout=3)
    await task
    assert got is not None
    assert got.run_id == "x"
    assert 0.05 < time.monotonic() - start < 2

    await bus.enqueue(QueuedRun("y"))
    await bus.enqueue(QueuedRun("z"))
    assert await bus.remove("y") is True
    assert await bus.remove("y") is False
    got = await bus.dequeue(timeout=1)
    assert got is not None
    assert got.run_id == "z"


async def test_concurrent_consumers_each_get_a_run_once(bus: Bus) -> None:
    for i in range(5):
        await bus.enqueue(QueuedRun(f"r{i}"))
    results = await asyncio.gather(*(bus.dequeue(timeout=0.5) for _ in range(8)))
    ids = [r.run_id for r in results if r is not None]
    assert sorted(ids) == [f"r{i}" for i in range(5)]


async def test_stream_read_after_an_id_gives_exactly_the_rest(bus: Bus) -> None:
    ids = []
    for i in range(10):
        ids.append(await bus.append("run1", RunEvent(EventKind.DELTA, {"text": f"t{i}"})))
    assert all(valid_entry_id(i) for i in ids)
    assert len(set(ids)) == 10
    everything = await bus.read("run1", None, timeout=0)
    assert [e.id for e in everything] == ids
    assert [e.event.data["text"] for e in everything] == [f"t{i}" for i in range(10)]
    assert everything[0].event.kind is EventKind.DELTA
    rest = await bus.read("run1", ids[3], timeout=0)
    assert [e.event.data["text"] for e in rest] == [f"t{i}" for i in range(4, 10)]
    assert await bus.read("run1", ids[-1], timeout=0.05) == []
    limited = await bus.read("run1", None, timeout=0, count=3)
    assert len(limited) == 3
    assert await bus.stream_exists("run1")
    assert not await bus.stream_exists("run2")
    assert await bus.read("run2", None, timeout=0.05) == []


async def test_stream_read_blocks_until_an_event(bus: Bus) -> None:
    first = await bus.append("run1", RunEvent(EventKind.STATUS, {"status": "queued"}))

    async def later() -> None:
        await asyncio.sleep(0.1)
        await bus.append("run1", RunEvent(EventKind.DONE, {"status": "completed"}))

    task = asyncio.create_task(later())
    start = time.monotonic()
    got = await bus.read("run1", first, timeout=3)
    await task
    assert [e.event.kind for e in got] == [EventKind.DONE]
    assert got[0].event.data == {"status": "completed"}
    assert time.monotonic() - start < 2


async def test_reading_a_stream_that_does_not_exist_yet_sees_its_first_event(bus: Bus) -> None:
    async def later() -> None:
        await asyncio.sleep(0.1)
        await bus.append("fresh", RunEvent(EventKind.STATUS, {"status": "queued"}))

    task = asyncio.create_task(later())
    got = await bus.read("fresh", None, timeout=3)
    await task
    assert [e.event.data for e in got] == [{"status": "queued"}]


async def test_streams_expire(bus_kind: str) -> None:
    bus = await make_bus(bus_kind, BusLimits(stream_ttl_seconds=1))
    try:
        await bus.append("short", RunEvent(EventKind.DELTA, {"text": "x"}))
        assert await bus.stream_exists("short")
        await asyncio.sleep(1.3)
        assert not await bus.stream_exists("short")
        assert await bus.read("short", None, timeout=0) == []
    finally:
        await bus.close()


async def test_cancel_signal(bus: Bus) -> None:
    assert not await bus.cancel_requested("r1")
    assert await bus.wait_cancel("r1", timeout=0.05) is False

    async def later() -> None:
        await asyncio.sleep(0.1)
        await bus.request_cancel("r1")

    task = asyncio.create_task(later())
    start = time.monotonic()
    assert await bus.wait_cancel("r1", timeout=3) is True
    await task
    assert time.monotonic() - start < 1
    assert await bus.cancel_requested("r1")
    assert await bus.wait_cancel("r1", timeout=0.05) is True  # stays set
    assert not await bus.cancel_requested("r2")


async def test_stream_slots_per_user(bus: Bus) -> None:
    assert await bus.open_stream("u1", "s1", limit=2, ttl=30)
    assert await bus.open_stream("u1", "s2", limit=2, ttl=30)
    assert not await bus.open_stream("u1", "s3", limit=2, ttl=30)
    assert await bus.open_stream("u1", "s2", limit=2, ttl=30)  # refreshing a held slot
    assert await bus.open_stream("u2", "s1", limit=2, ttl=30)  # users are separate
    await bus.close_stream("u1", "s1")
    assert await bus.open_stream("u1", "s3", limit=2, ttl=30)


async def test_stream_slots_lapse_when_not_refreshed(bus: Bus) -> None:
    assert await bus.open_stream("u1", "s1", limit=1, ttl=0.3)
    assert not await bus.open_stream("u1", "s2", limit=1, ttl=0.3)
    await asyncio.sleep(0.5)
    assert await bus.open_stream("u1", "s2", limit=1, ttl=0.3)


async def test_ping_and_entry_id_validation(bus: Bus) -> None:
    await bus.ping()
    assert valid_entry_id("1732243200000-0")
    for bad in ("", "x", "1-", "-1", "1-a", "a-1", "1-2-3", "9" * 50 + "-0"):
        assert not valid_entry_id(bad), bad


async def test_blocking_waits_longer_than_five_seconds_do_not_fail(bus: Bus) -> None:
    """redis-py's default socket timeout is 5 s; a cancel wait or dequeue may block longer."""
    start = time.monotonic()
    results = await asyncio.gather(bus.wait_cancel("slow", timeout=6), bus.dequeue(timeout=6))
    assert list(results) == [False, None]
    assert time.monotonic() - start >= 5.9


async def test_a_run_queued_again_after_removal_goes_to_the_back(bus: Bus) -> None:
    await bus.enqueue(QueuedRun("a", priority=0))
    await bus.enqueue(QueuedRun("b", priority=5))
    assert await bus.remove("b")
    await bus.enqueue(QueuedRun("b", priority=0))
    got = [await bus.dequeue(timeout=1) for _ in range(2)]
    assert [(g.run_id, g.priority) for g in got if g] == [("a", 0), ("b", 0)]
    assert await bus.dequeue(timeout=0) is None


async def test_dequeue_without_waiting_takes_a_queued_run(bus: Bus) -> None:
    await bus.enqueue(QueuedRun("a", priority=3))
    assert await bus.dequeue(timeout=0) == QueuedRun("a", 3)
    assert await bus.dequeue(timeout=0) is None


async def test_appends_of_a_fenced_out_attempt_are_refused(bus: Bus) -> None:
    async def texts() -> list[str]:
        return [e.event.data["t"] for e in await bus.read("r1", None, timeout=0)]

    await bus.append("r1", RunEvent(EventKind.STATUS, {"t": "unfenced"}))
    await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "first 1"}), fence=1)
    await bus.raise_fence("r1", 2)  # the sweeper took attempt 1 back
    with pytest.raises(StaleAttempt):
        await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "late 1"}), fence=1)
    await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "second 2"}), fence=2)
    await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "third 3"}), fence=3)  # raises it
    with pytest.raises(StaleAttempt):
        await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "late 2"}), fence=2)
    await bus.raise_fence("r1", 1)  # never lowered
    with pytest.raises(StaleAttempt):
        await bus.append("r1", RunEvent(EventKind.DELTA, {"t": "late 2 again"}), fence=2)
    await bus.append("r1", RunEvent(EventKind.DONE, {"t": "done"}))  # unfenced: taken
    assert await texts() == ["unfenced", "first 1", "second 2", "third 3", "done"]
    # fences are per run
    await bus.append("r2", RunEvent(EventKind.DELTA, {"t": "other 1"}), fence=1)
