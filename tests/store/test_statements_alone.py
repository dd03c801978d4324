"""``Database.alone`` and ``Database.reads`` on Postgres: each statement on its own, in
autocommit (no ``BEGIN``/``COMMIT`` round trips), where ``transaction`` opens a block; on
SQLite both are transactions as any other."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from sqlalchemy import text

from parley.store.database import Database


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def _two_clocks(db: Database, how: str) -> tuple[datetime, datetime]:
    """The transaction's clock read twice, 50 ms apart, in one session (or connection)."""
    clock = text("SELECT now()")
    if how == "alone":
        async with db.alone() as conn:
            first = await conn.scalar(clock)
            await asyncio.sleep(0.05)
            return first, await conn.scalar(clock)
    async with db.reads() if how == "reads" else db.transaction() as s:
        first = await s.scalar(clock)
        await asyncio.sleep(0.05)
        return first, await s.scalar(clock)


async def test_reads_and_lone_statements_run_outside_a_transaction_block_on_postgres(
    db: Database,
) -> None:
    if db.dialect != "postgresql":
        pytest.skip("SQLite: reads and lone statements are transactions, as the others")
    first, second = await _two_clocks(db, "transaction")
    assert first == second  # one transaction: its clock stands still
    for how in ("reads", "alone"):
        first, second = await _two_clocks(db, how)
        assert second > first, how  # each statement its own transaction: no BEGIN, no COMMIT


async def test_a_read_session_sees_what_was_committed_before_it(
    db: Database,
) -> None:
    async with db.transaction() as s:
        await s.execute(text("CREATE TABLE IF NOT EXISTS probe_reads (n integer)"))
        await s.execute(text("DELETE FROM probe_reads"))
        await s.execute(text("INSERT INTO probe_reads VALUES (1)"))
    try:
        async with db.reads() as s:
            assert await s.scalar(text("SELECT count(*) FROM probe_reads")) == 1
        async with db.transaction() as s:
            await s.execute(text("INSERT INTO probe_reads VALUES (2)"))
        async with db.reads() as s:
            assert await s.scalar(text("SELECT count(*) FROM probe_reads")) == 2
    finally:
        async with db.transaction() as s:
            await s.execute(text("DROP TABLE probe_reads"))
