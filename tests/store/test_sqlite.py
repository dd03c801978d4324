"""SQLite's statements run on the event loop's thread; a BEGIN that finds another process
holding the file's write lock waits off the loop, and the loop goes on meanwhile."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from sqlalchemy import text

from parley.store.database import Database


async def test_a_write_waits_for_another_writer_without_stopping_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    try:
        async with db.transaction() as s:
            await s.execute(text("CREATE TABLE t (n INTEGER)"))
        holding = threading.Event()
        release = threading.Event()

        def other_process() -> None:  # another connection: what a second process would be
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            other.execute("INSERT INTO t VALUES (1)")
            holding.set()
            release.wait(10)
            other.execute("COMMIT")
            other.close()

        holder = threading.Thread(target=other_process)
        holder.start()
        await asyncio.to_thread(holding.wait, 10)

        async def write() -> list[int]:
            async with db.transaction() as s:
                await s.execute(text("INSERT INTO t VALUES (2)"))
                return list((await s.scalars(text("SELECT n FROM t ORDER BY n"))).all())

        writing = asyncio.create_task(write())
        ticks = 0
        while ticks < 20:  # the loop runs while the write waits for the lock
            await asyncio.sleep(0.01)
            ticks += 1
            assert not writing.done()
        release.set()
        assert await asyncio.wait_for(writing, 10) == [1, 2]  # waited, then wrote after it
        await asyncio.to_thread(holder.join, 10)
    finally:
        await db.dispose()
