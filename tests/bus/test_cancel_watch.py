"""The Redis bus's stop watch (``bus/redis/cancel_watch.py``): every wait for a run's stop in
a process shares one subscription, so running runs hold no pooled connection and a run's end
closes none; a stop published while the subscription is being made again still wakes its
waiter (the flags are looked at once it is back). The contract itself (a stop wakes a wait,
a wait times out False, a flag stays set) is ``tests/bus/test_bus.py::test_cancel_signal``,
on both buses."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from parley.bus.interface import BusLimits
from parley.bus.redis import RedisBus
from tests.builders import BUS_BACKENDS, REDIS_URL
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("redis" not in BUS_BACKENDS, reason="the Redis bus's own")

LONG = 60.0  # the waits' own timeout: far past anything this file waits for
RUNS = 200


@pytest.fixture
async def bus() -> AsyncIterator[RedisBus]:
    bus = RedisBus(REDIS_URL, BusLimits(), namespace=f"test-{uuid.uuid4().hex[:12]}")
    await bus.ping()
    yield bus
    await bus.close()


def connected(bus: RedisBus) -> int:
    """The bus's pooled connections now open (a cancelled blocking command closes its own)."""
    pool = bus._redis.connection_pool
    every = [*pool._available_connections, *pool._in_use_connections]
    return sum(1 for c in every if c.is_connected)


async def armed(bus: RedisBus, run_ids: list[str]) -> None:
    async def all_waiting() -> bool:
        return all(bus._cancel_watch.waiting(r) for r in run_ids)

    await eventually(all_waiting, "every wait to be listening for its stop")


async def test_many_runs_waiting_for_a_stop_hold_no_pooled_connection_and_their_end_closes_none(
    bus: RedisBus,
) -> None:
    pool = bus._redis.connection_pool
    for round_ in range(2):  # the second round: the runs that came after the first ended
        run_ids = [f"r{round_}-{i}" for i in range(RUNS)]
        waits = [asyncio.create_task(bus.wait_cancel(r, timeout=LONG)) for r in run_ids]
        await armed(bus, run_ids)

        async def none_held() -> bool:  # (a wait's one look at its flag may still be out)
            return not pool._in_use_connections

        await eventually(none_held, "no pooled connection held by the waits")
        made = connected(bus)
        await bus.request_cancel(run_ids[0])
        assert await asyncio.wait_for(waits[0], LONG / 4) is True
        for wait in waits[1:]:  # the runs end: their watches are cancelled, as the worker's
            wait.cancel()
        await asyncio.gather(*waits[1:], return_exceptions=True)
        assert connected(bus) == made
        assert not bus._cancel_watch._waiters  # nothing left behind


async def test_a_stop_published_while_the_subscription_is_down_still_wakes_its_waiter(
    bus: RedisBus,
) -> None:
    wait = asyncio.create_task(bus.wait_cancel("r1", timeout=LONG))
    await armed(bus, ["r1"])
    watch = bus._cancel_watch
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        await admin.client_kill_filter(_id=str(watch.client_id))
    finally:
        await admin.aclose()

    async def down() -> bool:
        return not watch.subscribed.is_set()

    await eventually(down, "the watch to see its connection gone")
    await bus.request_cancel("r1")  # published to nobody: the watch waits before it resubscribes
    assert await asyncio.wait_for(wait, LONG / 4) is True
    assert watch.subscribed.is_set()


async def test_a_worker_of_the_previous_release_waiting_on_its_list_is_woken_by_a_stop(
    bus: RedisBus,
) -> None:
    """During an upgrade the previous release's workers still ``BLPOP`` on the run's list."""
    popped = bus._redis.blpop([bus._run_key("r1", "cancelq")], LONG)
    previous: asyncio.Future[object] = asyncio.ensure_future(popped)
    await asyncio.sleep(0.2)  # (not synchronisation: a pop made later finds the item anyway)
    await bus.request_cancel("r1")
    assert await asyncio.wait_for(previous, LONG / 4)
