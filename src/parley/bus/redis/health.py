"""Pooled Redis connections that outlive their server: found before use, not by a command.

A Redis that restarts in a container, or fails over, can leave the pool's idle connections
pointing at a peer that is gone without having said so (no FIN: the container's network was
torn down): the pool's check at checkout sees nothing to read and hands one out, and the
next command on it fails (``ConnectionError``), so a send or a run failed once per stale
connection after every restart. Commands are not retried (a command whose reply was lost
may have run: an append twice, a budget charged twice). Instead a connection idle for more
than ``HEALTH_CHECK_SECONDS`` is PINGed before its command, and a failed PING, which has no
effect to repeat, is retried once on a new connection (``_PingRetried``). After any
connection of a pool fails, every other one is PINGed the same way before its next command,
however recently it was used: an outage ends them all, and the first run after one failed
on a connection last used a moment before it (found by making the run's start use one
connection fewer). A connection made after the failure is not PINGed in its own set-up.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

HEALTH_CHECK_SECONDS = 1.0
# (redis-py turns a socket's OSError into its ConnectionError)
_LOST = (RedisConnectionError, RedisTimeoutError, OSError)
_PING_RETRY = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError, RedisTimeoutError))


class _PingRetried:
    """Mixed into the pool's connection class: its health check's PING retried once, and
    run before the next command of every connection of the pool that has not answered
    since a connection of the pool last failed (``failed_at``: an outage ends them all,
    and one used a moment before it is not idle long enough to be checked otherwise)."""

    health_check_interval: float
    next_health_check: float
    failed_at = float("-inf")  # (set on each pool's own class: ``checked_pool``)
    _answered_at = float("-inf")
    _setting_up = False

    async def check_health(self) -> None:
        if self._setting_up:
            return
        now = asyncio.get_running_loop().time()
        due = now > self.next_health_check or self._answered_at <= type(self).failed_at
        if self.health_check_interval and due:
            await _PING_RETRY.call_with_retry(
                self._send_ping,  # type: ignore[attr-defined]
                self._ping_failed,  # type: ignore[attr-defined]
                with_failure_count=True,
            )

    async def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        """A connection being set up is not PINGed amid its own set-up, whatever fails
        meanwhile: its commands are pipelined, their replies read together, and a PING
        would read one of them as its own."""
        self._setting_up = True
        try:
            await super().on_connect_check_health(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._setting_up = False
            self._answered_at = asyncio.get_running_loop().time()

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except _LOST:
            type(self).failed_at = asyncio.get_running_loop().time()
            raise
        self._answered_at = asyncio.get_running_loop().time()
        return reply


def checked_pool(pool: aioredis.ConnectionPool) -> aioredis.ConnectionPool:
    """``pool``, its connections (plain, TLS or Unix socket, as its URL chose) made with the
    retried health check; give the pool ``health_check_interval=HEALTH_CHECK_SECONDS``."""
    base = pool.connection_class
    name = f"PingRetried{base.__name__}"
    pool.connection_class = type(name, (_PingRetried, base), {"failed_at": float("-inf")})
    return pool
