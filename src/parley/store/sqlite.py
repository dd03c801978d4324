"""SQLite connections for the async engine whose statements run on the event loop's thread.

aiosqlite runs every call on a thread of the connection's own and hands each result back
through the event loop: a transaction of eight calls waits for eight turns of a loop that,
under load, is busy relaying thousands of tokens. Since SQLite's writes are serialised
in-process (``Database``), that wait was held under the write lock, and it, not SQLite, set
how many runs a second ``parley serve`` could make (about 20 at 32 streams).

A statement on a local SQLite file takes microseconds, so here it runs where it is awaited.
Only ``BEGIN`` may wait: for another process's write lock on the same file (the split stack
on one SQLite file), up to ``busy_timeout``, and the loop must not stop for that. So it is
tried at once with no busy timeout, and only if another process holds the lock does it go
to the connection's thread to wait there. Once ``BEGIN IMMEDIATE`` holds the write lock,
nothing else in the transaction waits for another writer (WAL: readers never block).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import aiosqlite

BUSY_TIMEOUT_SECONDS = 30.0


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection that runs statements inline, ``BEGIN`` on its thread."""

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")
        if not _begins(args):
            return fn(*args, **kwargs)
        try:
            return self._begin_at_once(fn, *args, **kwargs)
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
        # wait for the lock on the connection's thread, off the loop
        return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]

    def _begin_at_once(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``BEGIN`` if no other process holds the write lock now; else SQLITE_BUSY."""
        self._conn.execute("PRAGMA busy_timeout = 0")
        try:
            return fn(*args, **kwargs)
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")


def _begins(args: tuple[Any, ...]) -> bool:
    return bool(args) and isinstance(args[0], str) and args[0].lstrip()[:5].upper() == "BEGIN"


def connector(database: str) -> Callable[[], InlineConnection]:
    """SQLAlchemy's ``async_creator`` for the file (or ``:memory:``) at ``database``."""

    def connect() -> InlineConnection:
        def open_file() -> sqlite3.Connection:
            # used on this thread and the connection's own, never both at once: each call
            # is awaited before the next is made
            return sqlite3.connect(database, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)

        connection = InlineConnection(open_file, iter_chunk_size=64)
        connection._thread.daemon = True  # as SQLAlchemy's own aiosqlite connect does
        return connection

    return connect
