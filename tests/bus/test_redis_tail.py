"""The Redis bus's stream tail: one connection serves every waiting reader of a process."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis

from parley.bus.interface import BusLimits, EventKind, RunEvent, StreamEntry
from tests.builders import BUS_BACKENDS, REDIS_URL, make_bus

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


def _delta(text: str) -> RunEvent:
    return RunEvent(EventKind.DELTA, {"text": text})


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts sockets through /proc")
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

    async def reader(run_id: str, after: str | None) -> tuple[list[StreamEntry], float]:
        got = await bus.read(run_id, after, timeout=10)
        return got, time.monotonic()

    sampler = asyncio.create_task(sample())
    try:
        after: dict[str, str | None] = dict.fromkeys(runs)
        for round_ in range(3):  # a few tokens per run: the later rounds come from the cache
            readers = {r: asyncio.create_task(reader(r, after[r])) for r in runs}
            await asyncio.sleep(0.5)
            assert not any(task.done() for task in readers.values())  # all waiting
            start = time.monotonic()
            ids: dict[str, str] = {}
            appended: dict[str, float] = {}
            for r in runs:
                ids[r] = await bus.append(r, _delta(f"{r}/{round_}"))
                appended[r] = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*readers.values()), 10)
            for r, (got, _) in zip(runs, results, strict=True):
                assert got == [StreamEntry(ids[r], _delta(f"{r}/{round_}"))]
                after[r] = ids[r]
            latencies = [at - appended[r] for r, (_, at) in zip(runs, results, strict=True)]
            assert max(latencies) < 0.5, max(latencies)
            assert max(at for _, at in results) - start < 2.0  # 300 appends, one at a time
        end = _redis_sockets()
    finally:
        sampling = False
        await sampler
        await bus.close()
    assert end - before < 10, (before, end)
    # the pool (a few non-blocking reads at a time, appends, CLIENT UNBLOCK) and the tail
    assert peak - before < 10, (before, peak)


async def test_a_new_stream_joins_the_blocked_tail_at_once() -> None:
    bus = await make_bus("redis", LIMITS)
    try:
        # the tail is blocked on another stream; every new one needs a CLIENT UNBLOCK
        other = asyncio.create_task(bus.read("other", None, timeout=10))
        await asyncio.sleep(0.3)
        for i in range(8):
            run_id = f"late{i}"
            task = asyncio.create_task(bus.read(run_id, None, timeout=5))
            await asyncio.sleep(0.05)  # waiting now: Redis had nothing
            assert not task.done()
            appended = time.monotonic()
            entry_id = await bus.append(run_id, _delta(run_id))
            got = await asyncio.wait_for(task, 5)
            assert time.monotonic() - appended < 0.2
            assert got == [StreamEntry(entry_id, _delta(run_id))]
        assert not other.done()
        other.cancel()
    finally:
        await bus.close()


async def test_new_streams_joining_at_any_moment_are_never_missed() -> None:
    """Appends racing the readers' first look and the tail's re-issued XREAD."""
    bus = await make_bus("redis", LIMITS)
    rng = random.Random(7)
    try:
        keepalive = asyncio.create_task(bus.read("other", None, timeout=30))
        for i in range(60):
            run_id = f"race{i}"
            task = asyncio.create_task(bus.read(run_id, None, timeout=5))
            await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.001, 0.002, 0.004]))
            appended = time.monotonic()
            entry_id = await bus.append(run_id, _delta(run_id))
            got = await asyncio.wait_for(task, 5)
            assert time.monotonic() - appended < 0.2, i
            assert [e.id for e in got] == [entry_id]
        keepalive.cancel()
    finally:
        await bus.close()


async def test_an_unblock_that_beats_the_tails_xread_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLIENT UNBLOCK can reach Redis before the tail's XREAD does (and unblock nothing)."""
    bus = await make_bus("redis", LIMITS)
    tail = bus._tail  # type: ignore[attr-defined]
    connect = tail._connect

    async def slow_connect() -> aioredis.Redis:
        client: Any = await connect()
        if not hasattr(client, "slowed"):
            xread = client.xread

            async def slow_xread(*args: object, **kwargs: object) -> object:
                await asyncio.sleep(0.03)  # a slow way to Redis: "blocked" but not there yet
                return await xread(*args, **kwargs)

            client.xread = slow_xread
            client.slowed = True
        return cast(aioredis.Redis, client)

    monkeypatch.setattr(tail, "_connect", slow_connect)
    try:
        follower_after = None

        async def follow() -> None:
            nonlocal follower_after
            while True:
                got = await bus.read("other", follower_after, timeout=10)
                follower_after = got[-1].id

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.3)
        for i in range(5):
            await bus.append("other", _delta("wake the tail"))  # it re-issues its XREAD...
            await asyncio.sleep(0.005)
            run_id = f"new{i}"  # ... and this stream joins while that XREAD is on its way
            task = asyncio.create_task(bus.read(run_id, None, timeout=5))
            await asyncio.sleep(0.1)
            appended = time.monotonic()
            entry_id = await bus.append(run_id, _delta(run_id))
            assert [e.id for e in await asyncio.wait_for(task, 5)] == [entry_id]
            assert time.monotonic() - appended < 0.2, i
        follower.cancel()
    finally:
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
            while len(seen) < total:
                got = await bus.read("long", after, timeout=5)
                assert got, "the follower timed out"
                seen += [e.id for e in got]
                after = got[-1].id
            return seen

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        for i in range(total):
            ids.append(await bus.append("long", _delta(str(i))))
        assert await asyncio.wait_for(follower, 20) == ids  # the tail's cache overflowed

        for start in (0, 10, _CACHE_SIZE, total - _CACHE_SIZE - 5, total - 3):
            collected: list[StreamEntry] = []
            after = ids[start]
            while after != ids[-1]:
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


async def test_a_made_up_future_id_does_not_stall_other_readers() -> None:
    bus = await make_bus("redis", LIMITS)
    try:
        future = asyncio.create_task(bus.read("r", "99999999999999-0", timeout=1))
        await asyncio.sleep(0.1)
        honest = asyncio.create_task(bus.read("r", None, timeout=5))
        await asyncio.sleep(0.1)
        appended = time.monotonic()
        entry_id = await bus.append("r", _delta("x"))
        assert [e.id for e in await asyncio.wait_for(honest, 5)] == [entry_id]
        assert time.monotonic() - appended < 0.2
        assert await future == []
    finally:
        await bus.close()


async def test_the_tail_survives_losing_its_connection() -> None:
    bus = await make_bus("redis", LIMITS)
    admin = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        waiting = asyncio.create_task(bus.read("a", None, timeout=10))
        await asyncio.sleep(0.2)
        tail_id = bus._tail._client_id  # type: ignore[attr-defined]
        assert tail_id is not None
        await admin.client_kill_filter(_id=tail_id)
        await asyncio.sleep(0.05)
        entry_id = await bus.append("a", _delta("after the kill"))
        assert [e.id for e in await asyncio.wait_for(waiting, 5)] == [entry_id]
        # reconnected with a new client id: new streams still join at once
        await asyncio.sleep(0.5)
        assert bus._tail._client_id not in (None, tail_id)  # type: ignore[attr-defined]
        task = asyncio.create_task(bus.read("b", None, timeout=5))
        await asyncio.sleep(0.05)
        appended = time.monotonic()
        entry_id = await bus.append("b", _delta("b"))
        assert [e.id for e in await asyncio.wait_for(task, 5)] == [entry_id]
        assert time.monotonic() - appended < 0.2
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
