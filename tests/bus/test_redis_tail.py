"""The Redis bus's stream tail: one connection serves every waiting reader of a process.

No timings are asserted here. The tests that say a stream joins the tail "at once" lengthen
the tail's XREAD block (``long_block``) far past the reads' timeouts (``READ``), which are
past the deadline a test waits for an entry (``woken``): an entry that reached its reader
only when the tail's block ended, or at the reader's own deadline (when it asks Redis once
more), fails the test instead of passing late. How fast the tail relays is measured by
``bench/relay.py``.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis

from parley.bus.interface import Bus, BusLimits, EventKind, RunEvent, StreamEntry
from parley.bus.redis import RedisBus
from parley.bus.redis import tail as tail_module
from tests.builders import BUS_BACKENDS, REDIS_URL, make_bus
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("redis" not in BUS_BACKENDS, reason="needs the Redis bus")

LIMITS = BusLimits(queue_max=5, stream_maxlen=10_000, stream_ttl_seconds=60, cancel_ttl_seconds=60)


def _redis_sockets() -> int:
    """Established TCP connections of this process to the Redis port (Linux /proc)."""
    port = urlparse(REDIS_URL).port or 6379
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            count += 1
    return count


T = TypeVar("T")

READ = 60.0  # the timeout of the reads a test wakes
WOKEN = 30.0  # how long a test waits for a woken read: less than READ


def _delta(text: str) -> RunEvent:
    return RunEvent(EventKind.DELTA, {"text": text})


def _redis(bus: Bus) -> RedisBus:
    assert isinstance(bus, RedisBus)
    return bus


@pytest.fixture
def long_block(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tail's XREAD blocks for 10 minutes unless unblocked (instead of 2 s)."""
    monkeypatch.setattr(tail_module, "_TAIL_BLOCK_MS", 600_000)
    yield


async def _waiting(bus: Bus, run_id: str, readers: int = 1) -> None:
    """Wait until ``readers`` reads of the run's stream wait on the tail's watch of it."""
    tail = _redis(bus)._tail
    key = _redis(bus)._run_key(run_id, "events")

    async def waiting() -> bool:
        watch = tail.watches.get(key)
        return watch is not None and watch.waiters >= readers

    await eventually(waiting, f"{readers} reader(s) of {run_id} waiting on the tail")


async def _tail_blocked(bus: Bus) -> int:
    """Wait until the tail's XREAD is blocked in Redis; the tail's client id."""
    tail = _redis(bus)._tail
    admin = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)

    async def blocked() -> int:
        client_id = tail._client_id
        if client_id is None:
            return 0
        for c in await admin.client_list(client_id=[client_id]):
            if "b" in c["flags"] and c["cmd"] == "xread":
                return client_id
        return 0

    try:
        return await eventually(blocked, "the tail's XREAD to block in Redis")
    finally:
        await admin.aclose()


async def _woken(task: Awaitable[T]) -> T:
    """What a read returns once the test has appended what it waits for: within WOKEN
    seconds, well before its own timeout (READ) and the tail's block (``long_block``)."""
    async with asyncio.timeout(WOKEN):
        return await task


async def _all(tasks: list[asyncio.Task[T]]) -> list[T]:
    return await _woken(asyncio.gather(*tasks))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts sockets through /proc")
@pytest.mark.usefixtures("long_block")
async def test_hundreds_of_waiting_readers_use_a_handful_of_connections() -> None:
    bus = await make_bus("redis", LIMITS)
    runs = [f"run{i}" for i in range(300)]
    before = _redis_sockets()
    peak = before
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, _redis_sockets())
            await asyncio.sleep(0.05)  # pooled connections stay open: the end count tells too

    sampler = asyncio.create_task(sample())
    try:
        after: dict[str, str | None] = dict.fromkeys(runs)
        for round_ in range(3):  # a few tokens per run: the later rounds come from the cache
            readers = {r: asyncio.create_task(bus.read(r, after[r], timeout=READ)) for r in runs}
            for r in runs:
                await _waiting(bus, r)
            assert not any(task.done() for task in readers.values())  # all waiting
            ids: dict[str, str] = {}
            for r in runs:
                ids[r] = await bus.append(r, _delta(f"{r}/{round_}"))
            results = await _all(list(readers.values()))
            for r, got in zip(runs, results, strict=True):
                assert got == [StreamEntry(ids[r], _delta(f"{r}/{round_}"))]
                after[r] = ids[r]
        end = _redis_sockets()
    finally:
        sampling = False
        await sampler
        await bus.close()
    assert end - before < 10, (before, end)
    # the pool (a few non-blocking reads at a time, appends, CLIENT UNBLOCK) and the tail
    assert peak - before < 10, (before, peak)


@pytest.mark.usefixtures("long_block")
async def test_a_new_stream_joins_the_blocked_tail_at_once() -> None:
    bus = await make_bus("redis", LIMITS)
    try:
        # the tail is blocked on another stream; every new one needs a CLIENT UNBLOCK
        other = asyncio.create_task(bus.read("other", None, timeout=10 * READ))
        await _tail_blocked(bus)
        for i in range(8):
            run_id = f"late{i}"
            task = asyncio.create_task(bus.read(run_id, None, timeout=READ))
            await _waiting(bus, run_id)  # waiting now: Redis had nothing
            assert not task.done()
            entry_id = await bus.append(run_id, _delta(run_id))
            assert await _woken(task) == [StreamEntry(entry_id, _delta(run_id))]
        assert not other.done()
        other.cancel()
    finally:
        await bus.close()


@pytest.mark.usefixtures("long_block")
async def test_new_streams_joining_at_any_moment_are_never_missed() -> None:
    """Appends racing the readers' first look and the tail's re-issued XREAD."""
    bus = await make_bus("redis", LIMITS)
    rng = random.Random(7)
    try:
        keepalive = asyncio.create_task(bus.read("other", None, timeout=10 * READ))
        for i in range(60):
            run_id = f"race{i}"
            task = asyncio.create_task(bus.read(run_id, None, timeout=READ))
            # not synchronisation: a random head start, so the append lands at any moment
            await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.001, 0.002, 0.004]))
            entry_id = await bus.append(run_id, _delta(run_id))
            assert [e.id for e in await _woken(task)] == [entry_id], i
        keepalive.cancel()
    finally:
        await bus.close()


@pytest.mark.usefixtures("long_block")
async def test_an_unblock_that_beats_the_tails_xread_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLIENT UNBLOCK can reach Redis before the tail's XREAD does (and unblock nothing).

    Made to happen every time: the tail's XREAD is held on its way to Redis until a CLIENT
    UNBLOCK has been answered, then let go."""
    bus = await make_bus("redis", LIMITS)
    tail = _redis(bus)._tail
    connect = tail._connect
    hold_next = False  # hold the tail's next XREAD
    held = asyncio.Event()  # an XREAD is held
    release = asyncio.Event()

    async def held_connect() -> aioredis.Redis:
        client: Any = await connect()
        if not hasattr(client, "held"):
            xread = client.xread

            async def held_xread(*args: object, **kwargs: object) -> object:
                nonlocal hold_next
                if hold_next:
                    hold_next = False
                    held.set()
                    await release.wait()  # "blocked" for the tail, not there yet
                return await xread(*args, **kwargs)

            client.xread = held_xread
            client.held = True
        return cast(aioredis.Redis, client)

    unblock = _redis(bus)._redis.client_unblock
    early_unblocks = 0

    async def client_unblock(*args: Any, **kwargs: Any) -> Any:
        nonlocal early_unblocks
        answer = await unblock(*args, **kwargs)
        if held.is_set() and not release.is_set():
            early_unblocks += 1  # it reached Redis before the held XREAD: let that go now
            release.set()
        return answer

    monkeypatch.setattr(tail, "_connect", held_connect)
    monkeypatch.setattr(_redis(bus)._redis, "client_unblock", client_unblock)
    try:
        follower_after = None

        async def follow() -> None:
            nonlocal follower_after
            while True:  # a reader that never stops: ends by cancel
                got = await bus.read("other", follower_after, timeout=READ)
                follower_after = got[-1].id

        follower = asyncio.create_task(follow())
        await _tail_blocked(bus)
        for i in range(5):
            held.clear()
            release.clear()
            hold_next = True
            await bus.append("other", _delta("wake the tail"))  # it re-issues its XREAD...

            async def is_held() -> bool:
                return held.is_set()

            await eventually(is_held, "the tail's re-issued XREAD to be held")
            run_id = f"new{i}"  # ... and this stream joins while that XREAD is on its way
            task = asyncio.create_task(bus.read(run_id, None, timeout=READ))
            await _waiting(bus, run_id)
            entry_id = await bus.append(run_id, _delta(run_id))
            assert [e.id for e in await _woken(task)] == [entry_id], i
            assert early_unblocks == i + 1  # the unblock did come before the XREAD
        follower.cancel()
    finally:
        release.set()
        await bus.close()


async def test_resuming_from_before_the_cache_gives_exactly_the_rest() -> None:
    from parley.bus.redis.tail import _CACHE_SIZE

    total = 3 * _CACHE_SIZE
    bus = await make_bus("redis", LIMITS)
    try:
        ids: list[str] = []

        async def follow() -> list[str]:
            seen: list[str] = []
            after = None
            while len(seen) < total:  # each read brings at least one more, or fails
                got = await bus.read("long", after, timeout=READ)
                assert got, "the follower timed out"
                seen += [e.id for e in got]
                after = got[-1].id
            return seen

        follower = asyncio.create_task(follow())
        await _waiting(bus, "long")  # following through the tail
        for i in range(total):
            ids.append(await bus.append("long", _delta(str(i))))
        assert await _woken(follower) == ids  # the tail's cache overflowed

        for start in (0, 10, _CACHE_SIZE, total - _CACHE_SIZE - 5, total - 3):
            collected: list[StreamEntry] = []
            after = ids[start]
            while after != ids[-1]:  # each read brings at least one more, or fails
                got = await bus.read("long", after, timeout=1, count=300)
                assert got
                collected += got
                after = got[-1].id
            assert [e.id for e in collected] == ids[start + 1 :]
            assert [e.event.data["text"] for e in collected] == [
                str(i) for i in range(start + 1, total)
            ]
        assert await bus.read("long", ids[-1], timeout=0.2) == []
        everything = await bus.read("long", None, timeout=1, count=total)
        assert [e.id for e in everything] == ids
    finally:
        await bus.close()


@pytest.mark.usefixtures("long_block")
async def test_a_made_up_future_id_does_not_stall_other_readers() -> None:
    bus = await make_bus("redis", LIMITS)
    try:
        future = asyncio.create_task(bus.read("r", "99999999999999-0", timeout=5))
        await _waiting(bus, "r")
        honest = asyncio.create_task(bus.read("r", None, timeout=READ))
        await _waiting(bus, "r", readers=2)
        entry_id = await bus.append("r", _delta("x"))
        assert [e.id for e in await _woken(honest)] == [entry_id]
        assert await _woken(future) == []  # at its own timeout: nothing after that id
    finally:
        await bus.close()


@pytest.mark.usefixtures("long_block")
async def test_the_tail_survives_losing_its_connection() -> None:
    bus = await make_bus("redis", LIMITS)
    tail = _redis(bus)._tail
    admin = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        waiting = asyncio.create_task(bus.read("a", None, timeout=READ))
        tail_id = await _tail_blocked(bus)
        await admin.client_kill_filter(_id=str(tail_id))
        entry_id = await bus.append("a", _delta("after the kill"))
        assert [e.id for e in await _woken(waiting)] == [entry_id]
        # reconnected with a new client id: new streams still join at once

        async def reconnected() -> bool:
            return tail._client_id not in (None, tail_id)

        await eventually(reconnected, "the tail to reconnect")
        await _tail_blocked(bus)
        task = asyncio.create_task(bus.read("b", None, timeout=READ))
        await _waiting(bus, "b")
        entry_id = await bus.append("b", _delta("b"))
        assert [e.id for e in await _woken(task)] == [entry_id]
    finally:
        await admin.aclose()
        await bus.close()


async def test_close_stops_the_tail() -> None:
    bus = await make_bus("redis", LIMITS)
    task = asyncio.create_task(bus.read("a", None, timeout=0.3))
    assert await task == []
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert "parley-redis-stream-tail" in names
    await bus.close()
    names = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
    assert not any(name.startswith("parley-redis") for name in names)


async def test_woken_reads_leave_no_timeout_behind_and_a_quiet_read_times_out() -> None:
    """A reader's timeout is a place in the tail's shared deadlines, not a timer of its own:
    a read its entry woke leaves that place at once (nothing kept per token), and a read
    nothing comes for still ends at its timeout, empty."""
    bus = await make_bus("redis", LIMITS)
    deadlines = _redis(bus)._tail.deadlines
    runs = [f"run{i}" for i in range(200)]
    try:
        readers = [asyncio.create_task(bus.read(r, None, timeout=READ)) for r in runs]
        for r in runs:
            await _waiting(bus, r)
        assert deadlines.waiting() == len(runs)
        for r in runs:
            await bus.append(r, _delta(r))
        assert all(len(got) == 1 for got in await _all(readers))
        assert deadlines.waiting() == 0
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await bus.read("quiet", None, timeout=0.3) == []
        assert 0.3 <= loop.time() - began < 5
    finally:
        await bus.close()
