"""The bus suite runs against the in-process bus and the real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from parley.bus.interface import Bus, BusLimits
from tests.builders import BUS_BACKENDS, make_bus


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
