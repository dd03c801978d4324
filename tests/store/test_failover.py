"""Postgres pools that ride through a failover (``store/failover.py``), on the real server:
a connection whose server turned read-only under it is dropped and the write answered as an
outage (503), not a bug (500); a list of hosts finds the one that takes writes; a pool that
finds none is an outage too; every reconnection is logged once, naming the server; and the
replica's pool reads only."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool

from parley import connections
from parley.config import load_settings
from parley.errors import ConfigurationError
from parley.outages import outage
from parley.store import failover
from parley.store.database import Database, ReplicaWrite
from parley.store.failover import failover_error
from tests.builders import BACKENDS
from tests.faults.conftest import via
from tests.faults.proxy import FaultProxy
from tests.processes import free_port
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS, reason="Postgres pools")

# a write that leaves nothing behind (a read-only transaction refuses every CREATE)
WRITE = "CREATE TEMP TABLE IF NOT EXISTS failover_scratch (id int)"


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[Database]:
    database = Database(postgres_url, pool_size=1)
    yield database
    await database.dispose()


async def _backend_pid(db: Database) -> int:
    async with db.transaction() as s:
        pid: int = await s.scalar(text("SELECT pg_backend_pid()"))
    return pid


async def test_a_write_refused_by_a_demoted_server_is_an_outage_and_drops_the_connection(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The pooled connection's server now refuses writes (as a primary demoted to standby
    under it would: SQLSTATE 25006): the write is an outage (503 with Retry-After), the
    connection is dropped, and the next transaction gets a fresh one that writes."""
    first = await _backend_pid(db)
    async with db.engine.connect() as conn:  # the pool's one connection, read-only from now
        await conn.execute(text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))
        await conn.commit()
    caplog.set_level(logging.WARNING, logger="parley.store.failover")
    with pytest.raises(DBAPIError) as raised:
        async with db.transaction() as s:
            await s.execute(text(WRITE))
    assert raised.value.connection_invalidated
    refusal = outage(raised.value)
    assert refusal is not None and refusal.status_code == 503 and refusal.retry_after
    async with db.transaction() as s:
        await s.execute(text(WRITE))
    assert await _backend_pid(db) != first
    assert db.watch is not None and db.watch.reconnects == 1
    lines = [r.getMessage() for r in caplog.records]
    assert any("connection lost (" in line and "read-only" in line for line in lines), lines
    assert any("reconnected to 127.0.0.1:5432 (primary) after" in line for line in lines), lines


async def test_a_connection_killed_by_the_server_is_replaced_before_use(
    db: Database, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An administrator (or a failover) ends the pooled connection's backend: the pre-ping
    notices, the pool reconnects, the statement succeeds, and the reconnection is logged."""
    pid = await _backend_pid(db)
    other = Database(postgres_url)
    async with other.transaction() as s:
        await s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    await other.dispose()
    caplog.set_level(logging.WARNING, logger="parley.store.failover")
    assert await _backend_pid(db) != pid
    assert any("reconnected to 127.0.0.1:5432" in r.getMessage() for r in caplog.records)


async def test_a_connection_to_a_vanished_server_is_replaced_before_use(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pooled connection whose server vanished without closing it (a host or container
    gone: no FIN) looks open; the ping before it is lent fails, and the transaction runs
    on a new connection."""
    target = urlsplit(postgres_url)
    proxy = await FaultProxy(target.hostname or "127.0.0.1", target.port or 5432).start()
    db = Database(via(postgres_url, proxy.port), pool_size=1)
    try:
        first = await _backend_pid(db)
        assert await _backend_pid(db) == first and proxy.connections == 1  # reused
        proxy.reset_on_next_request()  # the next byte on it meets a dead peer
        caplog.set_level(logging.WARNING, logger="parley.store.failover")
        assert await _backend_pid(db) != first
        assert proxy.connections == 2
        lines = [r.getMessage() for r in caplog.records]
        assert any("connection lost (" in line for line in lines), lines
        assert any("reconnected to 127.0.0.1" in line for line in lines), lines
    finally:
        await db.dispose()
        await proxy.close()


async def test_several_hosts_find_the_one_that_answers(postgres_url: str) -> None:
    """libpq's form with a dead host first: connecting goes on to the next, no error."""
    url = make_url(postgres_url)
    dead = free_port()
    several = f"postgresql://{url.username}@127.0.0.1:{dead},127.0.0.1:{url.port}/{url.database}"
    db = Database(several, connect_timeout=2)
    try:
        async with db.transaction() as s:
            assert await s.scalar(text("SELECT inet_server_port()")) == url.port
            name = await s.scalar(text("SELECT current_setting('application_name')"))
        assert name == "parley-primary"
    finally:
        await db.dispose()


@pytest.fixture
async def read_only_role(postgres_url: str) -> AsyncIterator[str]:
    """A role whose sessions are read-only: to a read-write pool, a server that takes no
    writes (as every node is for a moment of a failover)."""
    role = f"ro_{uuid.uuid4().hex[:8]}"
    admin = Database(postgres_url)
    async with admin.transaction() as s:
        await s.execute(text(f"CREATE ROLE {role} LOGIN"))
        await s.execute(text(f"ALTER ROLE {role} SET default_transaction_read_only = on"))
    yield role
    async with admin.transaction() as s:
        await s.execute(text(f"DROP ROLE {role}"))
    await admin.dispose()


async def test_no_host_taking_writes_is_an_outage(postgres_url: str, read_only_role: str) -> None:
    url = make_url(postgres_url)
    db = Database(
        f"postgresql://{read_only_role}@127.0.0.1:{url.port}/{url.database}", connect_timeout=2
    )
    try:
        with pytest.raises(DBAPIError) as raised:
            async with db.transaction() as s:
                await s.execute(text("SELECT 1"))
        assert failover_error(raised.value)
        refusal = outage(raised.value)
        assert refusal is not None and refusal.status_code == 503
    finally:
        await db.dispose()


async def test_the_replica_pool_reads_only(postgres_url: str) -> None:
    """Reads go to the replica's pool (its own application_name), in read-only
    transactions: a write there is a bug (``ReplicaWrite``), never a write on a replica or
    on a primary it fell back to. With no standby up, prefer-standby takes the primary."""
    db = Database(postgres_url, replica_url=postgres_url)
    try:
        async with db.reading() as s:
            name = await s.scalar(text("SELECT current_setting('application_name')"))
            read_only = await s.scalar(text("SHOW transaction_read_only"))
        assert (name, read_only) == ("parley-replica", "on")
        with pytest.raises(ReplicaWrite):
            async with db.reading() as s:
                await s.execute(text(WRITE))
    finally:
        await db.dispose()


def test_only_failover_errors_count_as_failovers() -> None:
    class Coded(Exception):
        def __init__(self, code: str) -> None:
            self.sqlstate = code

    assert all(failover_error(Coded(c)) for c in ("08006", "57P01", "57P02", "57P03", "25006"))
    assert not failover_error(Coded("25006"), writes=False)  # the replica's: a bug
    assert not any(failover_error(Coded(c)) for c in ("23505", "42P01", "40001"))
    assert not failover_error(ValueError("no sqlstate"))


async def test_a_replica_connection_to_a_primary_is_replaced_once_old_enough(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica pool's connection whose server is a primary (a standby promoted under it)
    is kept while young, then replaced on checkout, so that reads find the new standby."""

    async def replica_pid(db: Database) -> int:
        async with db.reading() as s:
            pid: int = await s.scalar(text("SELECT pg_backend_pid()"))
        return pid

    db = Database(postgres_url, replica_url=postgres_url, pool_size=1)
    try:
        first = await replica_pid(db)
        assert await replica_pid(db) == first  # young: kept
        monkeypatch.setattr(failover, "REPLICA_RECHECK_SECONDS", 0.2)

        async def replaced() -> bool:
            return await replica_pid(db) != first

        await eventually(replaced, "the old connection to a primary replaced", timeout=5)
    finally:
        await db.dispose()


async def test_the_pools_are_sized_by_the_setting(postgres_url: str, tmp_path: Path) -> None:
    """``database_pool_size`` sizes every Postgres pool a process keeps (the primary's and
    the replica's), and as many more connections under a burst; 0 is refused at start-up."""
    settings = load_settings(
        database_url=postgres_url,
        database_replica_url=postgres_url,
        database_pool_size=3,
        data_dir=tmp_path,
    )
    db = connections.database(settings)
    try:
        for engine in (db.engine, db.replica):
            assert engine is not None
            pool = engine.pool
            assert isinstance(pool, QueuePool) and pool.size() == 3 and pool._max_overflow == 3
            held = [await engine.connect() for _ in range(6)]  # the pool and the burst
            assert pool.checkedout() == 6
            for conn in held:
                await conn.close()
    finally:
        await db.dispose()
    with pytest.raises(ConfigurationError, match="database_pool_size"):
        load_settings(database_url=postgres_url, database_pool_size=0, data_dir=tmp_path)
