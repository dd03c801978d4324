"""The database handle: one async engine and its session factory, and for Postgres an
optional second one on the replicas.

SQLite (aiosqlite) is the embedded default; Postgres (asyncpg) is the scaled-out
one. Both run the same schema and the same queries. A Postgres pool rides through a
failover (``store/failover.py``); reads that tolerate a little lag may go to replicas
(``reading``; who decides which reads may: ``store/routing.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from parley.store import sqlite
from parley.store.failover import READ_ONLY_STATE, ConnectionWatch, postgres_engine, sqlstate
from parley.store.urls import Role, normalize_database_url

DEFAULT_CONNECT_TIMEOUT = 5.0


class ReplicaWrite(RuntimeError):
    """A statement inside ``Database.reading()`` tried to write: a bug (reads only there)."""


class Database:
    """SQLite transactions are serialised in-process and begin IMMEDIATE: SQLite has one
    writer at a time, and taking turns here is far cheaper than its busy-wait (and never
    fails with 'database is locked' on a read that turns into a write)."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        pool_size: int = 10,
        replica_url: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.url = normalize_database_url(url)
        self.watch: ConnectionWatch | None = None
        self.replica: AsyncEngine | None = None
        self.replica_watch: ConnectionWatch | None = None
        pool = partial(
            postgres_engine, pool_size=pool_size, connect_timeout=connect_timeout, echo=echo
        )
        if make_url(self.url).get_backend_name() == "sqlite":
            if replica_url:
                raise ValueError("read replicas need Postgres")
            self.engine: AsyncEngine = _sqlite_engine(self.url, echo=echo)
        else:
            self.engine, self.watch = pool(self.url, name="primary", writes=True)
        if replica_url:
            replica = normalize_database_url(replica_url, Role.REPLICA)
            self.replica, self.replica_watch = pool(replica, name="replica", writes=False)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._replica_sessions = None
        if self.replica is not None:
            self._replica_sessions = async_sessionmaker(self.replica, expire_on_commit=False)
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
        async with self._turn(), self._sessions() as session, session.begin():
            yield session

    def _turn(self) -> asyncio.Lock:
        """SQLite's one writer at a time, taken in this process (made on first use, in the
        running loop)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @asynccontextmanager
    async def alone(self) -> AsyncIterator[AsyncConnection]:
        """A connection for one statement that is atomic by itself (a conditional UPDATE
        returning its row), without the ORM: on Postgres in autocommit, so without the
        BEGIN and COMMIT round trips of a transaction; on SQLite a transaction as any other
        (its turn taken as ``transaction`` takes it)."""
        if not self._serial:
            async with self.engine.connect() as conn:
                yield await conn.execution_options(isolation_level="AUTOCOMMIT")
            return
        async with self._turn(), self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def reads(self) -> AsyncIterator[AsyncSession]:
        """A session for reads only, each statement on its own: on Postgres an autocommit
        connection (no BEGIN and COMMIT round trips; under READ COMMITTED each statement of
        a transaction takes its own snapshot too, so nothing read differs, but nothing is
        locked: no ``FOR UPDATE`` here, and no write); on SQLite ``transaction``."""
        if self._serial:
            async with self.transaction() as s:
                yield s
            return
        async with self.alone() as conn, AsyncSession(bind=conn, expire_on_commit=False) as s:
            yield s

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        """A read-only transaction on a replica (this needs ``replica_url``). Its connection
        is taken before the body runs, so a replica that cannot be reached raises here
        (the caller may read from the primary instead). A write inside is ``ReplicaWrite``."""
        if self._replica_sessions is None:
            raise RuntimeError("no replica configured")
        async with self._replica_sessions() as session, session.begin():
            await session.connection()
            try:
                yield session
            except DBAPIError as e:
                if sqlstate(e) == READ_ONLY_STATE:
                    raise ReplicaWrite("a write inside Database.reading()") from e
                raise

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.replica is not None:
            await self.replica.dispose()


def _sqlite_engine(url: str, *, echo: bool) -> AsyncEngine:
    parsed = make_url(url)
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
