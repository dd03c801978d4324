"""Shared fixtures: every store-facing test runs on SQLite AND on the real Postgres.

Postgres is reached at PARLEY_TEST_POSTGRES_URL (default: the local server's
``test`` database). Its schema is rebuilt from the migrations once per run and
emptied between tests. Set PARLEY_TEST_BACKENDS=sqlite to skip Postgres
locally; CI runs both. Under pytest-xdist (``make test`` runs three workers) each worker
uses a database of its own, the given name plus ``_gw0``, ``_gw1``... The databases, buses
and services are made by ``tests.builders``.

Two shapes of the service are on offer:

* ``settings`` / ``services`` / ``client``: the HTTP app over ``httpx.ASGITransport``, one
  per database backend, no worker (a run stays queued);
* ``run_settings`` / ``run_services`` / ``run_client``: the two real shapes of a deployment,
  SQLite with the in-process bus and Postgres with Redis, with a worker on the fast fake
  engine, served by a real uvicorn server.

No test can hang: pytest-timeout fails a test after ``timeout`` seconds (pyproject.toml), and
after ``SLOW_TIMEOUT`` seconds one marked ``slow`` (server processes, the browser) that sets
no ``pytest.mark.timeout`` of its own.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.api.app import create_app
from parley.config import Settings, load_settings
from parley.connections import bus_limits
from parley.services import Services
from tests.builders import (
    BACKENDS,
    POSTGRES_URL,
    ROOMY_TIERS,
    make_bus,
    migrated_sqlite,
    reset_postgres,
    served,
    services_for,
    truncate,
    within,
)
from tests.seaweed import S3Server, seaweed

# Under xdist three workers share two cores: one torch (OpenMP) thread each, or their
# spinning threads, the machine's other load and each other stall the model tests for minutes.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# The suite signs up and signs in hundreds of users from 127.0.0.1: the proof-of-work those
# would bring on is tested where a test sets its own thresholds (tests/accounts/
# test_challenge.py, tests/e2e/test_challenge_ui.py); server processes inherit these too.
for _name in (
    "SIGNUP_CHALLENGE_AFTER",
    "CHALLENGE_AFTER_FAILURES",
    "CHALLENGE_AFTER_EMAIL_FAILURES",
    "CHALLENGE_AFTER_ADDRESS_FAILURES",
):
    os.environ.setdefault(f"PARLEY_ACCOUNTS__{_name}", "100000")

STACKS = [s for s in ("sqlite-memory", "postgres-redis") if s.split("-")[0] in BACKENDS]

BLOB_KINDS = ("local", "s3")

SLOW_TIMEOUT = 300  # seconds, for tests marked slow (the default is pyproject's ``timeout``)


AXE_REPORTS = Path(__file__).resolve().parents[1] / "build" / "axe-report"
_STARTED = time.time()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The accessibility report of this run (tests/e2e/test_accessibility.py), if it ran."""
    reports = sorted(p for p in AXE_REPORTS.glob("*.txt") if p.stat().st_mtime >= _STARTED)
    if reports:
        terminalreporter.write_sep("-", "axe-core violations by impact, per screen")
        for report in reports:
            terminalreporter.write(report.read_text())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    # on a thread of its own: a browser test's Playwright may hold this thread's event loop
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, reset_postgres(POSTGRES_URL)).result()
    yield POSTGRES_URL


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database of each backend."""
    if request.param == "sqlite":
        return migrated_sqlite(tmp_path)
    url = str(request.getfixturevalue("postgres_url"))
    asyncio.run(truncate(url))
    return url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module to change settings."""
    return {}


@pytest.fixture
def settings(database_url: str, tmp_path: Path, settings_overrides: dict[str, Any]) -> Settings:
    return load_settings(
        **{
            "database_url": database_url,
            "data_dir": tmp_path,
            "engine": "fake",
            "tiers": ROOMY_TIERS,
            **settings_overrides,
        }
    )


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    svc = services_for(settings)
    yield svc
    await svc.close()


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(services, close_services=False)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as c:
        yield c


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(database url, bus kind) of a migrated, empty store."""
    if request.param == "sqlite-memory":
        return migrated_sqlite(tmp_path), "memory"
    url = str(request.getfixturevalue("postgres_url"))
    asyncio.run(truncate(url))
    return url, "redis"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    """Override (or parametrize) in a test module to change the run stack's settings."""
    return {}


@pytest.fixture
def run_settings(stack: tuple[str, str], tmp_path: Path, run_overrides: dict[str, Any]) -> Settings:
    url, _ = stack
    base: dict[str, Any] = {
        "database_url": url,
        "data_dir": tmp_path,
        "engine": "fake",
        "tiers": ROOMY_TIERS,
        "fake_engine": {
            "time_to_first_token_ms": 5,
            "inter_token_latency_ms": 2,
            "output_tokens": 24,
            "slots": 4,
        },
        # long enough that a loaded machine's stalls (renewal is every third of it) never
        # cost a run its lease; tests of a lapsing lease set a short one of their own (a
        # 2 s lease lost a run of test_tracing in a stressed run at load 7)
        "lease_seconds": 6,
        "sweep_interval_seconds": 0.3,
        "ping_interval_seconds": 1,
    }
    merged = {**base, **run_overrides}
    if "fake_engine" in run_overrides:
        merged["fake_engine"] = {**base["fake_engine"], **run_overrides["fake_engine"]}
    return load_settings(**merged)


@pytest.fixture
async def run_services(stack: tuple[str, str], run_settings: Settings) -> AsyncIterator[Services]:
    bus = await make_bus(stack[1], bus_limits(run_settings))
    svc = services_for(run_settings, bus=bus, worker=True)
    await svc.start()
    yield svc
    await within(svc.close(grace=1), 90, "closing the services")


@pytest.fixture
async def run_client(run_services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a real HTTP server (uvicorn, in this event loop): streams really stream
    and a client that stops reading really disconnects, as they would not over ASGITransport."""
    app = create_app(run_services, close_services=False)
    async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS), one per xdist worker, started when first asked for."""
    with seaweed(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture(params=BLOB_KINDS)
def blob_settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The ``blobs`` settings of each store: a directory, and a real S3 server (each test's
    keys under a prefix of its own)."""
    if request.param == "local":
        return {"kind": "local", "dir": str(tmp_path / "blobs")}
    server: S3Server = request.getfixturevalue("s3_server")
    return server.blob_settings(prefix=f"t/{tmp_path.name}")
