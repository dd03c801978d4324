"""Shared fixtures: every store-facing test runs on SQLite AND on the real Postgres.

Postgres is reached at PARLEY_TEST_POSTGRES_URL (default: the local server's
``test`` database). Its schema is rebuilt from the migrations once per run and
emptied between tests. Set PARLEY_TEST_BACKENDS=sqlite to skip Postgres
locally; CI runs both.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from parley.accounts.passwords import Passwords
from parley.api.app import create_app
from parley.api.state import Services, build_services
from parley.config import Settings, load_settings
from parley.store.database import Database
from parley.store.migrate import upgrade

POSTGRES_URL = os.environ.get(
    "PARLEY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
BACKENDS = os.environ.get("PARLEY_TEST_BACKENDS", "sqlite,postgres").split(",")
TABLES = ("runs", "messages", "chats", "api_keys", "sessions", "users")


def fast_passwords() -> Passwords:
    """Argon2id with tiny costs: the OWASP parameters are tested on their own."""
    return Passwords(time_cost=1, memory_kib=64, parallelism=1)


async def _reset_postgres() -> None:
    db = Database(POSTGRES_URL)
    try:
        async with db.engine.begin() as conn:
            await conn.execute(text("DROP SCHEMA public CASCADE"))
            await conn.execute(text("CREATE SCHEMA public"))
        await upgrade(db)
    finally:
        await db.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    asyncio.run(_reset_postgres())
    yield POSTGRES_URL


async def _truncate(url: str) -> None:
    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
    finally:
        await db.dispose()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database of each backend."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'parley.db'}"
        asyncio.run(_migrate(url))
        return url
    url = str(request.getfixturevalue("postgres_url"))
    asyncio.run(_truncate(url))
    return url


async def _migrate(url: str) -> None:
    db = Database(url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()


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
            **settings_overrides,
        }
    )


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    svc = build_services(settings, passwords=fast_passwords())
    yield svc
    await svc.close()


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(services, close_services=False)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as c:
        yield c
