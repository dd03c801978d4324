"""The database handle: one async engine and its session factory.

SQLite (aiosqlite) is the embedded default; Postgres (asyncpg) is the scaled-out
one. Both run the same schema and the same queries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from parley.store import sqlite


class Database:
    """SQLite transactions are serialised in-process and begin IMMEDIATE: SQLite has one
    writer at a time, and taking turns here is far cheaper than its busy-wait (and never
    fails with 'database is locked' on a read that turns into a write)."""

    def __init__(self, url: str, *, echo: bool = False, pool_size: int = 10) -> None:
        self.url = url
        self.engine: AsyncEngine = _create_engine(url, echo=echo, pool_size=pool_size)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._serial = self.engine.dialect.name == "sqlite"
        self._lock: asyncio.Lock | None = None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session inside one transaction: committed on success, rolled back on error."""
        if not self._serial:
            async with self._sessions() as session, session.begin():
                yield session
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock, self._sessions() as session, session.begin():
            yield session

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.engine.dispose()


def _create_engine(url: str, *, echo: bool, pool_size: int) -> AsyncEngine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_async_engine(
            url, echo=echo, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size
        )
    database = parsed.database or ":memory:"
    if database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, echo=echo, async_creator=sqlite.connector(database))
    event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    event.listen(engine.sync_engine, "begin", _sqlite_begin_immediate)
    return engine


def _sqlite_begin_immediate(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # let SQLAlchemy's "begin" event issue BEGIN (pysqlite's own would be deferred)
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
