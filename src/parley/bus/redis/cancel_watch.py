"""The Redis bus's stop watch: one subscription per process serves every ``wait_cancel``.

A worker watches each run it generates for a stop. Waiting for one with a ``BLPOP`` per run
held a pooled connection per running run for the whole answer (a thousand at a thousand
streams), and since the watch is cancelled when the answer ends, and redis-py closes a
connection whose command was cancelled, every run's end cost a connection torn down and
the next one a new connection made (its handshake included). Instead:

* ``request_cancel`` sets the run's flag and publishes the run's id on the bus's cancel
  channel (``ns:cancels``), in one script.
* One task per process, on a connection of its own, is subscribed to that channel and wakes
  the process's waiters for the id it hears. A waiter registers first and then looks at the
  flag once, so a stop published before the subscription (or between two connections) is not
  missed: each time the subscription is (re)made, the flags of every run waited for are
  looked at again, in one pipeline.
* The subscription is pinged when quiet; one that stays silent past ``_SILENT_SECONDS``
  (a dead peer that sent no reset) is dropped and made again. The task is started by the
  first wait, and again by a later wait if it ever ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from parley.bus.redis.dedicated import cancel_until_done, keep_stepping

_PING_SECONDS = 5.0  # a quiet subscription is pinged this often
_SILENT_SECONDS = 15.0  # ... and made again when nothing came back for this long

log = logging.getLogger(__name__)

Requested = Callable[[str], Awaitable[bool]]  # whether a run's stop flag is set
FlagsOf = Callable[[list[str]], Awaitable[list[bool]]]  # the same for many runs, at once


class CancelWatch:
    """The process's subscription to the cancel channel, and who waits on it."""

    def __init__(self, url: str, channel: str, flags_of: FlagsOf) -> None:
        self._url = url
        self._channel = channel
        self._flags_of = flags_of
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}
        self._armed: set[asyncio.Future[bool]] = set()  # waiters past their look at the flag
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.subscribed = asyncio.Event()  # (tests) the channel is being listened to
        self.client_id: int | None = None  # (tests) the subscription's connection

    async def wait(self, run_id: str, timeout: float, requested: Requested) -> bool:
        """True as soon as the run's stop is requested, False after ``timeout`` seconds."""
        if timeout <= 0:
            return await requested(run_id)
        woken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiting = self._waiters.setdefault(run_id, set())
        waiting.add(woken)
        try:
            self._follow()
            if await requested(run_id):  # (after registering: a stop meanwhile wakes us)
                return True
            self._armed.add(woken)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    return await woken
            return await requested(run_id)
        finally:
            self._armed.discard(woken)
            waiting.discard(woken)
            if not waiting and self._waiters.get(run_id) is waiting:
                del self._waiters[run_id]

    def waiting(self, run_id: str) -> bool:
        """(tests) A wait for the run's stop is past its look at the flag, and the channel is
        being listened to: a stop now can only reach it through the channel."""
        armed = any(w in self._armed for w in self._waiters.get(run_id, ()))
        return armed and self.subscribed.is_set()

    def wake(self, run_id: str) -> None:
        for woken in self._waiters.get(run_id, ()):
            if not woken.done():
                woken.set_result(True)

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        await cancel_until_done([task])

    def _follow(self) -> None:
        if self._closed or (self._task is not None and not self._task.done()):
            return
        # a fresh context: the watch outlives the wait that happens to start it
        self._task = asyncio.create_task(
            self._run(), name="parley-redis-cancel-watch", context=contextvars.Context()
        )

    async def _run(self) -> None:
        await keep_stepping(self._listen, what="cancel watch", running=lambda: not self._closed)

    async def _listen(self) -> None:
        client = aioredis.Redis.from_url(
            self._url, decode_responses=True, max_connections=1, retry=Retry(NoBackoff(), 0)
        )
        pubsub = client.pubsub()  # (takes the one connection CLIENT ID was sent on)
        try:
            client_id = int(await client.client_id())
            await pubsub.subscribe(self._channel)
            loop = asyncio.get_running_loop()
            heard = loop.time()
            while True:
                message = await pubsub.get_message(timeout=_PING_SECONDS)
                now = loop.time()
                if message is not None:
                    heard = now
                    await self._heard(message, client_id)
                elif now - heard > _SILENT_SECONDS:
                    raise RedisConnectionError("the cancel channel went silent")
                else:
                    await pubsub.ping()
        finally:
            self.subscribed.clear()
            self.client_id = None
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await client.aclose()

    async def _heard(self, message: dict[str, object], client_id: int) -> None:
        kind = message.get("type")
        if kind == "message":
            self.wake(str(message.get("data")))
        elif kind == "subscribe":
            # listening from now on: a stop published before is found by its flag
            self.client_id = client_id
            self.subscribed.set()
            await self._look_again()

    async def _look_again(self) -> None:
        run_ids = list(self._waiters)
        if not run_ids:
            return
        for run_id, flagged in zip(run_ids, await self._flags_of(run_ids), strict=True):
            if flagged:
                self.wake(run_id)
