"""Run tests execute on the two real shapes of a deployment: SQLite with the in-process bus,
and Postgres with Redis. The fake engine is fast and deterministic here."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from parley.api.app import create_app
from parley.bus.interface import Bus
from parley.config import Settings, load_settings
from parley.services import Services, build_bus, build_services
from tests.bus.conftest import REDIS_URL
from tests.conftest import BACKENDS, _migrate, _truncate, fast_passwords

STACKS = [s for s in ("sqlite-memory", "postgres-redis") if s.split("-")[0] in BACKENDS]


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(database url, bus kind) of a migrated, empty store."""
    if request.param == "sqlite-memory":
        url = f"sqlite+aiosqlite:///{tmp_path / 'parley.db'}"
        asyncio.run(_migrate(url))
        return url, "memory"
    url = str(request.getfixturevalue("postgres_url"))
    asyncio.run(_truncate(url))
    return url, "redis"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
def run_settings(stack: tuple[str, str], tmp_path: Path, run_overrides: dict[str, Any]) -> Settings:
    url, _ = stack
    base: dict[str, Any] = {
        "database_url": url,
        "data_dir": tmp_path,
        "engine": "fake",
        "fake_engine": {
            "time_to_first_token_ms": 5,
            "inter_token_latency_ms": 2,
            "output_tokens": 24,
            "slots": 4,
        },
        "lease_seconds": 2,
        "sweep_interval_seconds": 0.3,
        "ping_interval_seconds": 1,
    }
    merged = {**base, **run_overrides}
    if "fake_engine" in run_overrides:
        merged["fake_engine"] = {**base["fake_engine"], **run_overrides["fake_engine"]}
    return load_settings(**merged)


def make_bus(kind: str, settings: Settings) -> Bus:
    if kind == "memory":
        return build_bus(settings)
    return build_bus(settings, redis_url=REDIS_URL, namespace=f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def run_services(stack: tuple[str, str], run_settings: Settings) -> AsyncIterator[Services]:
    svc = build_services(
        run_settings,
        passwords=fast_passwords(),
        bus=make_bus(stack[1], run_settings),
        worker=True,
    )
    await svc.start()
    yield svc
    await svc.close(grace=1)


@pytest.fixture
async def run_client(run_services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a real HTTP server (uvicorn, in this event loop): streams really stream
    and a client that stops reading really disconnects, as they would not over ASGITransport."""
    app = create_app(run_services, close_services=False)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        yield c
    server.should_exit = True
    await task
