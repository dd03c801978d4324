"""Which server a read goes to: replicas for reads that tolerate a little lag, the primary
for everything a user has just written.

A read that tolerates lag (the chat list, a chat, its history pages) goes to a replica
(``Database.reading``) when one is configured, unless its user wrote within the last
``window`` seconds: a user's write marks them (``wrote``, on the bus, so the mark is seen by
every api process, whichever one took the write), and while the mark lasts their reads stay
on the primary. Who marks: the HTTP edge, for every unsafe request of an authenticated user
(before the route writes anything), and the finisher, for the user whose run it ended
(before the run's ``done`` is published). Replication lag beyond the window is the one way a
user could read an older state; the window (``read_your_writes_seconds``, 5 s by default) is
far above a healthy standby's lag (milliseconds), and a standby lagging further is a fault to
alarm on.

Everything else (authentication, a send's transaction, a run's state, the worker's reads)
reads the primary through ``Database.transaction``; writes never go to a replica (the replica
pool's transactions are read-only).

A replica that cannot be reached, or write marks that cannot be read (the bus is down), send
the read to the primary: a replica's outage costs the primary some load, not an error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession

from parley.bus.interface import WriteMarks
from parley.store.database import Database

log = logging.getLogger(__name__)

# the errors that say a replica cannot be reached now
_UNREACHABLE = (DBAPIError, PoolTimeout, OSError)


class Reads:
    def __init__(self, db: Database, marks: WriteMarks, *, window: float) -> None:
        self._db = db
        self._marks = marks
        self.window = window
        self.served = {"replica": 0, "primary": 0}  # lag-tolerant reads, by where they went
        self._down: set[str] = set()  # "marks", "replica": what failed last time (logged once)

    @property
    def replicated(self) -> bool:
        return self._db.replica is not None

    async def wrote(self, user_id: str) -> None:
        """Note that the user writes now: their reads stay on the primary for ``window`` s.
        A mark that cannot be made (the bus is down) is logged: while the bus is down, reads
        cannot see marks either and go to the primary."""
        if not self.replicated or self.window <= 0:
            return
        try:
            await self._marks.mark_write(user_id, ttl=self.window)
        except Exception as e:  # the bus's own errors: a write must not fail for a mark
            log.warning("user %s: the write mark was not kept (%r)", user_id, e)

    @asynccontextmanager
    async def session(self, user_id: str) -> AsyncIterator[AsyncSession]:
        """A transaction for a read that tolerates a little lag, on a replica when it may."""
        async with AsyncExitStack() as stack:
            session = None
            if await self._replica_allowed(user_id):
                session = await self._replica_session(stack)
            if session is None:
                session = await stack.enter_async_context(self._db.transaction())
                self.served["primary"] += 1
            else:
                self.served["replica"] += 1
            yield session

    async def _replica_allowed(self, user_id: str) -> bool:
        if not self.replicated:
            return False
        if self.window <= 0:
            return True
        try:
            wrote = await self._marks.wrote_recently(user_id)
        except Exception as e:  # the bus's own errors: the primary is always right
            self._failed("marks", "write marks cannot be read", e)
            return False
        self._works("marks", "write marks can be read again")
        return not wrote

    async def _replica_session(self, stack: AsyncExitStack) -> AsyncSession | None:
        try:
            session = await stack.enter_async_context(self._db.reading())
        except _UNREACHABLE as e:
            self._failed("replica", "the replica cannot be reached", e)
            return None
        self._works("replica", "the replica answers again")
        return session

    def _failed(self, what: str, message: str, e: BaseException) -> None:
        if what not in self._down:
            self._down.add(what)
            log.warning("%s (%r): lag-tolerant reads go to the primary meanwhile", message, e)

    def _works(self, what: str, message: str) -> None:
        if what in self._down:
            self._down.discard(what)
            log.warning("%s: lag-tolerant reads go to the replica", message)
