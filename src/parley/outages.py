"""A dependency's outage told apart from a bug.

When Redis or Postgres cannot be reached, or a connection to one is cut mid-request, or
Postgres fails over (its old primary refuses writes, no host takes them yet), the
drivers raise their own exceptions; ``outage()`` turns those into the error tree's
``DependencyUnavailable`` (503 with Retry-After, ``dependency_unavailable``), naming what is
down, so the edge answers a clear refusal instead of a 500 and the client retries. Any other
exception is not an outage (None): a bug, answered 500.
"""

from __future__ import annotations

import logging

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from parley.errors import DependencyUnavailable
from parley.store.failover import failover_error

# what a client is told to wait before retrying: reconnection is tried about this often
RETRY_AFTER_SECONDS = 2.0

# the exception classes an outage can raise through a request (the edge handles these)
OUTAGE_EXCEPTIONS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    DBAPIError,
    PoolTimeout,
    OSError,
)


def outage(exc: BaseException) -> DependencyUnavailable | None:
    """The refusal ``exc`` amounts to if it is a dependency's outage; None otherwise."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return _down("the message bus (Redis)", exc)
    if isinstance(exc, PoolTimeout):
        return _down("the database (no connection free in time)", exc)
    if isinstance(exc, DBAPIError):
        # a failover: the server shutting down or not yet up, no listed host taking writes,
        # a write refused by a primary demoted to standby (store/failover.py)
        if (
            exc.connection_invalidated
            or isinstance(exc, OperationalError | InterfaceError)
            or failover_error(exc)
        ):
            return _down("the database", exc)
        return None
    if isinstance(exc, OSError):  # a connect refused or reset below the drivers' own errors
        return _down("the database or the message bus", exc)
    return None


def _down(what: str, exc: BaseException) -> DependencyUnavailable:
    return DependencyUnavailable(
        f"{what} cannot be reached just now ({type(exc).__name__}); nothing was changed, "
        f"retry in a few seconds",
        retry_after=RETRY_AFTER_SECONDS,
    )


def log_failure(logger: logging.Logger, exc: BaseException, what: str, *args: object) -> None:
    """A failed background step, logged once: a dependency's outage as one warning line
    naming it (it is expected while the outage lasts, and the step is retried), anything
    else with its traceback."""
    down = outage(exc)
    if down is None:
        logger.error(what, *args, exc_info=exc)
    else:
        logger.warning(f"{what}: %s", *args, down.message.split(";")[0])
