"""The bus suite runs against the in-process bus and the real Redis."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from parley.bus.interface import Bus, BusLimits
from parley.bus.memory import MemoryBus

REDIS_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BUS_BACKENDS = os.environ.get("PARLEY_TEST_BUSES", "memory,redis").split(",")


async def make_bus(kind: str, limits: BusLimits, namespace: str | None = None) -> Bus:
    """A fresh bus; two Redis buses made with one ``namespace`` share their keys."""
    if kind == "memory":
        return MemoryBus(limits)
    from parley.bus.redis import RedisBus

    bus = RedisBus(REDIS_URL, limits, namespace=namespace or f"test-{uuid.uuid4().hex[:12]}")
    await bus.ping()
    return bus


@pytest.fixture(params=BUS_BACKENDS)
def bus_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def bus_limits() -> BusLimits:
    return BusLimits(queue_max=5, stream_maxlen=1000, stream_ttl_seconds=60, cancel_ttl_seconds=60)


@pytest.fixture
async def bus(bus_kind: str, bus_limits: BusLimits) -> AsyncIterator[Bus]:
    b = await make_bus(bus_kind, bus_limits)
    yield b
    await b.close()
