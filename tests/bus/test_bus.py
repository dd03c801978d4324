"""One behaviour suite for every Bus implementation."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

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
from parley.bus.redis import RedisBus
from parley.domain import BACKGROUND_PRIORITY
from tests.builders import REDIS_URL, make_bus
from tests.waiting import eventually

T = TypeVar("T")

# The timeout of a blocking call the test wakes: far beyond the moment it is woken, and below
# the Redis bus's longest single block (MAX_BLOCK_SECONDS), so Redis blocks all along.
WAIT = 25.0


class Waits:
    """Tells when a bus call running in a task waits inside the bus, so that what the test
    does next happens during the wait, not before it. In process: the call's coroutine is
    suspended (the in-process bus does no I/O, so suspended is waiting). On Redis: CLIENT
    LIST shows one of this bus's connections (named for the test) blocked in the command;
    a read waits on the stream tail's watch of its stream (``tests/bus/test_redis_tail.py``).
    """

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.name = f"parley-test-{uuid.uuid4().hex[:12]}"

    @classmethod
    async def on(cls, bus: Bus) -> Waits:
        """Call before the call to watch: on Redis it names the bus's connections."""
        waits = cls(bus)
        if isinstance(bus, RedisBus):
            pool = bus._redis.connection_pool
            pool.connection_kwargs["client_name"] = waits.name
            await pool.disconnect()
            pool.reset()  # type: ignore[no-untyped-call]  # new connections are named
        return waits

    async def until(
        self, task: asyncio.Task[Any], *, command: str = "", stream: str = "", stop: str = ""
    ) -> None:
        """Wait until ``task`` waits in the bus: in ``command`` (a Redis command), for a
        read on ``stream``, or for the ``stop`` of a run."""
        bus = self.bus
        admin = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)

        async def waiting() -> bool:
            if task.done():
                raise AssertionError(f"the call returned without waiting: {task.result()!r}")
            if not isinstance(bus, RedisBus):
                coro = task.get_coro()
                assert inspect.iscoroutine(coro)
                return inspect.getcoroutinestate(coro) == inspect.CORO_SUSPENDED
            if stream:
                watch = bus._tail.watches.get(bus._run_key(stream, "events"))
                return watch is not None and watch.waiters > 0
            if stop:
                return bus._cancel_watch.waiting(stop)
            clients = await admin.client_list()
            return any(
                c["name"] == self.name and "b" in c["flags"] and c["cmd"] == command
                for c in clients
            )

        try:
            await eventually(waiting, f"the bus call to wait ({command or stream})")
        finally:
            await admin.aclose()


async def woken(task: asyncio.Task[T]) -> T:
    """The result of a waiting call the test has just woken: it comes then, long before the
    call's own timeout (WAIT). The deadline is generous: how soon is not asserted."""

    async def done() -> bool:
        return task.done()

    await eventually(done, "the woken call to return", timeout=WAIT / 2)
    return task.result()


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


async def test_a_background_run_is_taken_only_when_no_tier_run_is_queued(bus: Bus) -> None:
    await bus.enqueue(QueuedRun("summary", priority=BACKGROUND_PRIORITY))
    await bus.enqueue(QueuedRun("free", priority=0))
    assert await bus.dequeue(timeout=0.05, min_priority=0) == QueuedRun("free", 0)
    assert await bus.dequeue(timeout=0.05, min_priority=0) is None  # the summary waits
    assert await bus.dequeue(timeout=0) == QueuedRun("summary", BACKGROUND_PRIORITY)


async def test_dequeue_at_least_a_priority_leaves_the_lower_ones_queued(bus: Bus) -> None:
    await bus.enqueue(QueuedRun("low", priority=0))
    await bus.enqueue(QueuedRun("mid", priority=1))
    assert await bus.dequeue(timeout=0.05, min_priority=2) is None  # waited, none came
    assert await bus.dequeue(timeout=0, min_priority=1) == QueuedRun("mid", 1)
    waiting = asyncio.create_task(bus.dequeue(timeout=5, min_priority=2))
    await asyncio.sleep(0.05)
    await bus.enqueue(QueuedRun("top", priority=2))
    assert await waiting == QueuedRun("top", 2)  # came while it waited
    assert await bus.queue_length() == 1
    assert await bus.dequeue(timeout=0) == QueuedRun("low", 0)


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
    waits = await Waits.on(bus)
    task = asyncio.create_task(bus.dequeue(timeout=WAIT))
    await waits.until(task, command="bzpopmin")
    await bus.enqueue(QueuedRun("x"))
    got = await woken(task)
    assert got is not None
    assert got.run_id == "x"

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
    waits = await Waits.on(bus)
    task = asyncio.create_task(bus.read("run1", first, timeout=WAIT))
    await waits.until(task, stream="run1")
    await bus.append("run1", RunEvent(EventKind.DONE, {"status": "completed"}))
    got = await woken(task)
    assert [e.event.kind for e in got] == [EventKind.DONE]
    assert got[0].event.data == {"status": "completed"}


async def test_reading_a_stream_that_does_not_exist_yet_sees_its_first_event(bus: Bus) -> None:
    waits = await Waits.on(bus)
    task = asyncio.create_task(bus.read("fresh", None, timeout=WAIT))
    await waits.until(task, stream="fresh")
    await bus.append("fresh", RunEvent(EventKind.STATUS, {"status": "queued"}))
    got = await woken(task)
    assert [e.event.data for e in got] == [{"status": "queued"}]


async def test_every_new_stream_keeps_its_events_however_many_there_are(bus: Bus) -> None:
    """Making streams sweeps the expired ones now and then (in-process: whenever their
    number reaches a multiple of 64); a stream made as a sweep runs is kept all the same."""
    runs = [f"many-{i}" for i in range(200)]
    for run_id in runs:
        await bus.append(run_id, RunEvent(EventKind.STATUS, {"status": "queued"}))
    for run_id in runs:
        await bus.append(run_id, RunEvent(EventKind.DELTA, {"text": run_id}))
    for run_id in runs:
        got = await bus.read(run_id, None, timeout=0)
        assert [e.event.kind for e in got] == [EventKind.STATUS, EventKind.DELTA], run_id


async def test_streams_expire(bus_kind: str) -> None:
    bus = await make_bus(bus_kind, BusLimits(stream_ttl_seconds=1))
    try:
        await bus.append("short", RunEvent(EventKind.DELTA, {"text": "x"}))
        assert await bus.stream_exists("short")

        async def gone() -> bool:
            return not await bus.stream_exists("short")

        await eventually(gone, "the stream to expire")
        assert await bus.read("short", None, timeout=0) == []
    finally:
        await bus.close()


async def test_cancel_signal(bus: Bus) -> None:
    assert not await bus.cancel_requested("r1")
    assert await bus.wait_cancel("r1", timeout=0.05) is False
    waits = await Waits.on(bus)
    task = asyncio.create_task(bus.wait_cancel("r1", timeout=WAIT))
    await waits.until(task, stop="r1")
    await bus.request_cancel("r1")
    assert await woken(task) is True
    assert await bus.cancel_requested("r1")
    assert await bus.wait_cancel("r1", timeout=0.05) is True  # stays set
    assert not await bus.cancel_requested("r2")


async def test_run_slots_are_exact_under_concurrency_and_apart_from_stream_slots(
    bus: Bus,
) -> None:
    """100 runs of one user ask at once for one of its 3 run slots: exactly 3 get one."""
    held = await asyncio.gather(
        *(bus.hold_user_run("u1", f"r{i}", limit=3, ttl=30) for i in range(100))
    )
    winners = [f"r{i}" for i, ok in enumerate(held) if ok]
    assert len(winners) == 3
    assert await bus.hold_user_run("u1", winners[0], limit=3, ttl=30)  # a holder refreshes
    assert await bus.open_stream("u1", "s1", limit=1, ttl=30)  # stream slots are apart
    assert await bus.hold_user_run("u2", "x", limit=1, ttl=30)  # users are apart
    await bus.release_user_run("u1", winners[0])
    assert await bus.hold_user_run("u1", "late", limit=3, ttl=30)
    assert not await bus.hold_user_run("u1", "later", limit=3, ttl=30)


async def test_a_run_slot_refresh_extends_a_held_slot_and_never_takes_one(bus: Bus) -> None:
    assert not await bus.refresh_user_run("u1", "r1", ttl=30)  # not held: stays free
    assert await bus.hold_user_run("u1", "r2", limit=1, ttl=30)  # so r2 takes the one slot
    assert await bus.hold_user_run("u1", "r3", limit=2, ttl=0.3)
    assert await bus.refresh_user_run("u1", "r3", ttl=30)
    await asyncio.sleep(0.5)  # past the first ttl: the refresh holds it
    assert not await bus.hold_user_run("u1", "r4", limit=2, ttl=30)
    await bus.release_user_run("u1", "r3")
    assert not await bus.refresh_user_run("u1", "r3", ttl=30)  # a late refresh: no-op
    assert await bus.hold_user_run("u1", "r4", limit=2, ttl=30)


async def test_run_slots_lapse_when_not_refreshed(bus: Bus) -> None:
    assert await bus.hold_user_run("u1", "r1", limit=1, ttl=0.2)
    assert not await bus.hold_user_run("u1", "r2", limit=1, ttl=0.2)

    async def lapsed() -> bool:
        return await bus.hold_user_run("u1", "r2", limit=1, ttl=30)

    await eventually(lapsed, "the unrefreshed slot to lapse")


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

    async def lapsed() -> bool:  # a refused open takes nothing, so it can be asked again
        return await bus.open_stream("u1", "s2", limit=1, ttl=0.3)

    await eventually(lapsed, "the unrefreshed slot to lapse and free its place")


async def test_ping_and_entry_id_validation(bus: Bus) -> None:
    await bus.ping()
    assert valid_entry_id("1732243200000-0")
    for bad in ("", "x", "1-", "-1", "1-a", "a-1", "1-2-3", "9" * 50 + "-0"):
        assert not valid_entry_id(bad), bad


async def test_blocking_waits_longer_than_five_seconds_do_not_fail(bus: Bus) -> None:
    """redis-py's default socket timeout is 5 s; a cancel wait or dequeue may block longer."""
    waits = await Waits.on(bus)
    cancel = asyncio.create_task(bus.wait_cancel("slow", timeout=WAIT))
    work = asyncio.create_task(bus.dequeue(timeout=WAIT))
    await waits.until(cancel, stop="slow")
    await waits.until(work, command="bzpopmin")
    # not synchronisation: the condition under test, both calls blocked for over 5 s
    await asyncio.sleep(6)
    assert not cancel.done(), cancel
    assert not work.done(), work
    await bus.request_cancel("slow")
    await bus.enqueue(QueuedRun("late"))
    assert await woken(cancel) is True
    assert await woken(work) == QueuedRun("late", 0)


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
