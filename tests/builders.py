"""The one place the suites build their stores, buses and services.

Every store-facing test runs on SQLite and on the real Postgres (``PARLEY_TEST_BACKENDS``,
``PARLEY_TEST_POSTGRES_URL``); bus tests run on the in-process bus and the real Redis
(``PARLEY_TEST_BUSES``, ``PARLEY_TEST_REDIS_URL``). Fixtures (the conftest modules) call
these builders; tests that need one directly import it from here, never from a conftest.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import uvicorn
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.types import ASGIApp

from parley.accounts.passwords import Passwords
from parley.bus.interface import Bus, BusLimits
from parley.bus.memory import MemoryBus
from parley.config import Settings
from parley.services import Services, build_services
from parley.store.database import Database
from parley.store.migrate import upgrade
from parley.tiers import default_tiers
from tests.waiting import eventually

T = TypeVar("T")

# The default tiers with admission's limits lifted (one concurrent run per free user, free
# runs shed at 90% load): most tests send several runs at once as one user on a small fake
# engine. Tests of those limits set tiers of their own.
ROOMY_TIERS: dict[str, dict[str, object]] = {
    name: {
        **tier.model_dump(mode="json"),
        "max_concurrent_runs": 1000,
        "max_load": None,
        "downgrade_model": None,
    }
    for name, tier in default_tiers().items()
}


def _per_worker(url: str) -> str:
    """Under pytest-xdist each worker (gw0, gw1, ...) has a database of its own, named after
    the given one, so that one worker's truncate never empties another's tables."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{url}_{worker}" if worker else url


POSTGRES_URL = _per_worker(
    os.environ.get("PARLEY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
)
REDIS_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BACKENDS = os.environ.get("PARLEY_TEST_BACKENDS", "sqlite,postgres").split(",")
BUS_BACKENDS = os.environ.get("PARLEY_TEST_BUSES", "memory,redis").split(",")
TABLES = (
    "runs",
    "messages",
    "chats",
    "api_keys",
    "sessions",
    "users",
    "audit_records",
    "engine_reports",
)


def fast_passwords() -> Passwords:
    """Argon2id with tiny costs: the OWASP parameters are tested on their own."""
    return Passwords(time_cost=1, memory_kib=64, parallelism=1)


def sqlite_url(directory: Path) -> str:
    """The URL of a SQLite database file in ``directory``."""
    return f"sqlite+aiosqlite:///{directory / 'parley.db'}"


_template: list[Path] = []  # this process's migrated SQLite database, made once


def migrated_sqlite(directory: Path) -> str:
    """The URL of a migrated, empty SQLite database in ``directory``: a copy of one this
    process migrated once (migrating each test's database afresh cost ~0.3 s a test)."""
    if not _template:
        made = Path(tempfile.mkdtemp(prefix="parley-template-"))
        atexit.register(shutil.rmtree, made, True)
        asyncio.run(migrate(sqlite_url(made)))
        assert not list(made.glob("parley.db-*")), "the migrated database left a journal"
        _template.append(made / "parley.db")
    shutil.copyfile(_template[0], directory / "parley.db")
    return sqlite_url(directory)


async def migrate(url: str) -> None:
    """Bring the database at ``url`` to the newest schema."""
    db = Database(url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()


async def truncate(url: str) -> None:
    """Empty every table of the (Postgres) database at ``url``."""
    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
            genesis = "0" * 64  # the audit log's head, as a new database has it
            await conn.execute(
                text("UPDATE audit_head SET seq = 0, hash = :g, anchor_seq = 0, anchor_hash = :g"),
                {"g": genesis},
            )
    finally:
        await db.dispose()


async def _create_database(url: str) -> None:
    """Create the Postgres database at ``url`` unless it exists (from its server's
    ``postgres`` database)."""
    name = make_url(url).database
    admin = create_async_engine(
        make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    try:
        async with admin.connect() as conn:
            found = await conn.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            )
            if not found:
                await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()


async def reset_postgres(url: str = POSTGRES_URL) -> None:
    """Create the database if need be, drop its schema and rebuild it from the migrations."""
    await _create_database(url)
    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            await conn.execute(text("DROP SCHEMA public CASCADE"))
            await conn.execute(text("CREATE SCHEMA public"))
        await upgrade(db)
    finally:
        await db.dispose()


async def make_bus(kind: str, limits: BusLimits, namespace: str | None = None) -> Bus:
    """A fresh bus; two Redis buses made with one ``namespace`` share their keys."""
    if kind == "memory":
        return MemoryBus(limits)
    from parley.bus.redis import RedisBus

    bus = RedisBus(REDIS_URL, limits, namespace=namespace or f"test-{uuid.uuid4().hex[:12]}")
    await bus.ping()
    return bus


def services_for(settings: Settings, *, bus: Bus | None = None, worker: bool = False) -> Services:
    """The services of one process (``parley.services.build_services``), fast passwords."""
    return build_services(settings, passwords=fast_passwords(), bus=bus, worker=worker)


@asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[str]:
    """``app`` behind a real uvicorn server in this event loop; its base URL. Streams really
    stream and a client that stops reading really disconnects (unlike httpx's ASGI transport)."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())

    async def started() -> bool:
        assert not task.done(), "uvicorn did not start"
        return bool(server.started)

    try:
        await eventually(started, "uvicorn to start")
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await within(task, 90, "uvicorn's shutdown")


async def within(awaitable: Awaitable[T], seconds: float, what: str) -> T:
    """``awaitable``'s result; if it is not done within ``seconds``, a failure that names
    what each of the loop's tasks is waiting in (a teardown that hangs says where, where
    pytest-timeout shows only the loop idle in its selector)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        return task.result()
    stacks = io.StringIO()
    for other in asyncio.all_tasks():
        if other is not asyncio.current_task():
            other.print_stack(limit=15, file=stacks)
    task.cancel()
    raise AssertionError(f"{what}: not done in {seconds:g} s; the tasks:\n{stacks.getvalue()}")
