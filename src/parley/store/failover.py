"""Postgres pools that ride through a failover.

When the primary fails over (pg_auto_failover, Patroni, a managed service), connections to
the old primary die or, worse, live on to a server that is now a read-only standby. Each
pool made here:

* connects only where its role allows (``target_session_attrs``, set by ``store/urls.py``:
  the primary pool finds whichever listed host takes writes, so a promoted standby is found
  by reconnecting, never by a restart);
* gives up a connection attempt after ``connect_timeout`` seconds (a host that does not
  answer is not waited on for asyncpg's default minute);
* pings a connection before lending it, in one round trip (`SELECT 1`), and
  replaces it if that fails or the server has closed it (a backend terminated, a server
  shut down or gone). SQLAlchemy's ``pool_pre_ping`` pinged in three (begin, a prepared
  ``SELECT``, rollback: for pgbouncer's transaction mode, where a statement outside a
  transaction is just as safe), a tenth of the worker's CPU per answer;
* drops a connection, with the rest of the pool, when a statement fails the way a failover
  makes statements fail (``failover_error``: the connection lost, the server shutting down
  or not yet up, or for the primary pool a read-only transaction: the server was demoted
  under it);
* logs one warning per connection lost that way, and one line when connecting works again,
  naming the server it reached and how long connecting failed;
* for a replica pool, replaces a connection whose server is (now) a primary once it is
  ``REPLICA_RECHECK_SECONDS`` old, so reads move to a standby after a failover.

``failover_error`` also tells ``parley.outages`` which database errors are an outage (a 503
with Retry-After) rather than a bug (a 500).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from asyncpg.exceptions import TargetServerAttributeNotMatched  # type: ignore[import-untyped]
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import await_

log = logging.getLogger(__name__)

# SQLSTATEs of a server that cannot serve a statement now (each pool drops the connection):
# a connection exception (class 08), an administrator or crash shutdown, a server starting
# or stopping (57P01-57P03)
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})
# a write refused because the server is read-only: a primary demoted under the connection
READ_ONLY_STATE = "25006"
# a replica pool's connection that finds its server a primary (a standby promoted under it,
# or no standby up when it connected) reconnects to look for a standby once it is this old
REPLICA_RECHECK_SECONDS = 30.0


def sqlstate(exc: BaseException | None) -> str | None:
    """The SQLSTATE an error (SQLAlchemy's, its DBAPI's, or asyncpg's) carries, if any."""
    for candidate in (exc, getattr(exc, "orig", None)):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def failover_error(exc: BaseException, *, writes: bool = True) -> bool:
    """Whether ``exc`` is what a database failover (or outage) makes a statement raise:
    the server gone or not taking connections, no listed host taking writes, or (for a pool
    that ``writes``) a write refused by a server that has become a standby."""
    code = sqlstate(exc)
    if code is not None:
        if code.startswith("08") or code in _GONE_STATES:
            return True
        return writes and code == READ_ONLY_STATE
    driver = getattr(getattr(exc, "orig", None), "driver_exception", None)
    return isinstance(driver or exc, TargetServerAttributeNotMatched)


class ConnectionWatch:
    """One pool's log of lost connections and reconnections: a warning when a connection is
    first lost, then one line when a new connection works, naming its server; failures in
    between are counted (logged at debug), not each warned of."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lost_at: float | None = None  # monotonic: since when connecting has failed
        self.failures = 0  # since lost_at
        self.reconnects = 0

    def lost(self, reason: BaseException | None) -> None:
        self.failures += 1
        if self.lost_at is not None:
            log.debug("database (%s): still failing (%s)", self.name, _why(reason))
            return
        self.lost_at = time.monotonic()
        log.warning("database (%s): connection lost (%s)", self.name, _why(reason))

    def connected(self, dbapi_connection: Any) -> None:
        if self.lost_at is None:
            return
        down = time.monotonic() - self.lost_at
        failures, self.lost_at, self.failures = self.failures, None, 0
        self.reconnects += 1
        log.warning(
            "database (%s): reconnected to %s after %.1f s (%d failed attempts meanwhile)",
            self.name,
            describe(dbapi_connection),
            down,
            failures - 1,
        )


def describe(dbapi_connection: Any) -> str:
    """host:port (primary or standby) of a pooled asyncpg connection."""
    raw = getattr(dbapi_connection, "_connection", None)
    addr = getattr(raw, "_addr", None)
    where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
    return f"{where} ({server_role(dbapi_connection)})"


def server_role(dbapi_connection: Any) -> str:
    """primary, standby, or "role unknown", as the server last reported (Postgres 14+
    reports ``in_hot_standby`` with every change, so a promotion shows after one query)."""
    raw = getattr(dbapi_connection, "_connection", None)
    try:
        standby = getattr(raw.get_settings(), "in_hot_standby", None) if raw else None
    except Exception:  # a description is never worth failing a connection for
        standby = None
    return {"on": "standby", "off": "primary"}.get(str(standby), "role unknown")


def _why(reason: BaseException | None) -> str:
    if reason is None:
        return "no reason given"
    text = " ".join(str(reason).split())
    return f"{type(reason).__name__}: {text[:200]}"


def postgres_engine(
    url: str,
    *,
    name: str,
    writes: bool,
    pool_size: int,
    connect_timeout: float,
    echo: bool = False,
) -> tuple[AsyncEngine, ConnectionWatch]:
    """An engine for one role: ``writes`` (the primary's pool) or reads only (a replica's,
    whose transactions are read-only whatever server it reached)."""
    server_settings = {"application_name": f"parley-{name}"}
    if not writes:
        server_settings["default_transaction_read_only"] = "on"
    engine = create_async_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=max(connect_timeout * 2, 10.0),
        connect_args={"timeout": connect_timeout, "server_settings": server_settings},
    )
    watch = ConnectionWatch(name)
    _watch(engine, watch, writes=writes)
    return engine, watch


def _watch(engine: AsyncEngine, watch: ConnectionWatch, *, writes: bool) -> None:
    """The pool's listeners: drop connections a failover broke, log losses and reconnects,
    and (a replica pool) look for a standby again."""
    sync = engine.sync_engine

    @event.listens_for(sync, "handle_error")
    def _drop_on_failover(ctx: ExceptionContext) -> None:
        failover = failover_error(ctx.original_exception, writes=writes)
        if failover and ctx.connection is not None:
            ctx.is_disconnect = True  # this connection goes, and the pool's older ones
        if failover or ctx.is_disconnect:
            watch.lost(ctx.original_exception)

    @event.listens_for(sync, "connect")
    def _connected(dbapi_connection: Any, record: Any) -> None:
        record.info["connected_at"] = time.monotonic()
        watch.connected(dbapi_connection)

    @event.listens_for(sync, "checkout")
    def _check(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        try:
            _ping(dbapi_connection)
        except DisconnectionError as e:
            watch.lost(e.__cause__ or e)
            raise

    if not writes:
        event.listen(sync, "checkout", _look_for_a_standby)


def _ping(dbapi_connection: Any) -> None:
    """Raise ``DisconnectionError`` (the pool replaces the connection) for one the server
    closed, or one that does not answer a `SELECT 1` (simple protocol: one round trip)."""
    raw = dbapi_connection._connection
    if raw.is_closed():
        raise DisconnectionError("the server closed the connection")
    try:
        await_(raw.execute("SELECT 1"))
    except Exception as e:
        raise DisconnectionError(f"the connection did not answer: {e}") from e


def _look_for_a_standby(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """A replica pool's connection (pinged just now) whose server is a primary, made over
    ``REPLICA_RECHECK_SECONDS`` ago, is replaced: the new one goes to a standby if one answers
    (after a failover, reads move to the new standby within that time)."""
    age = time.monotonic() - record.info.get("connected_at", time.monotonic())
    if age > REPLICA_RECHECK_SECONDS and server_role(dbapi_connection) == "primary":
        log.info(
            "database (replica): %s is a primary; reconnecting to look for a standby",
            describe(dbapi_connection),
        )
        raise DisconnectionError("the replica pool's server is a primary")
