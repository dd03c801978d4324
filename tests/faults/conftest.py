"""The split stack for fault tests: Postgres and Redis each reached through a ``FaultProxy``
the test cuts, slows and restores; api and worker in this process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from parley.api.app import create_app
from parley.bus.redis import RedisBus
from parley.config import Settings, load_settings
from parley.connections import bus_limits
from parley.services import Services
from tests.builders import REDIS_URL, ROOMY_TIERS, served, services_for, truncate
from tests.faults.proxy import FaultProxy


def via(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's on 127.0.0.1."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@pytest.fixture
async def redis_proxy() -> AsyncIterator[FaultProxy]:
    target = urlsplit(REDIS_URL)
    proxy = await FaultProxy(target.hostname or "127.0.0.1", target.port or 6379).start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def postgres_proxy(postgres_url: str) -> AsyncIterator[FaultProxy]:
    target = urlsplit(postgres_url)
    proxy = await FaultProxy(target.hostname or "127.0.0.1", target.port or 5432).start()
    yield proxy
    await proxy.close()


@pytest.fixture
def split_settings(postgres_url: str, postgres_proxy: FaultProxy, tmp_path: Path) -> Settings:
    return load_settings(
        database_url=via(postgres_url, postgres_proxy.port),
        data_dir=tmp_path,
        engine="fake",
        tiers=ROOMY_TIERS,
        fake_engine={"time_to_first_token_ms": 5, "inter_token_latency_ms": 2, "output_tokens": 8},
        lease_seconds=3,
        sweep_interval_seconds=0.3,
        ping_interval_seconds=1,
    )


@pytest.fixture
def slow_answers(split_settings: Settings) -> None:
    """Answers of 40 tokens, one every 40 ms: long enough to cut the bus mid-answer."""
    split_settings.engines.fake.output_tokens = 40
    split_settings.engines.fake.inter_token_latency_ms = 40


@pytest.fixture
def bus_namespace(redis_proxy: FaultProxy) -> str:
    return f"faults-{id(redis_proxy)}"


@pytest.fixture
async def split(
    postgres_url: str, split_settings: Settings, redis_proxy: FaultProxy, bus_namespace: str
) -> AsyncIterator[Services]:
    await truncate(postgres_url)
    redis_url = via(REDIS_URL, redis_proxy.port)
    bus = RedisBus(redis_url, bus_limits(split_settings), namespace=bus_namespace)
    await bus.ping()
    svc = services_for(split_settings, bus=bus, worker=True)
    await svc.start()
    yield svc
    await svc.close(grace=1)


@pytest.fixture
async def client(split: Services) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(split, close_services=False)
    async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        yield c
