"""Appends to run streams batched: one pipelined round trip to Redis per flush for every
run a worker is generating, instead of one per token per run.

``append()`` queues the append script's call and waits for its own result. One flusher task
sends what is queued as one pipeline (``EVALSHA`` each, no transaction: each append stays its
own atomic script, fence check included), and as soon as that round trip is back, what was
queued meanwhile (group commit): an append alone goes out at once, as before, and under load
the appends of every run wait at most one round trip and share the next. At most
``max_batch`` a pipeline. ``batching`` off: each append is its own round trip (the previous
behaviour, kept for comparison).

A script unknown to the server (``NOSCRIPT``: Redis restarted, or a fresh one) is loaded and
the calls it refused are sent again. A connection error fails every append of the batch
(each caller sees it, as a single append would); a call's own error fails that call alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from parley.bus.redis.shared import _Arg


@dataclass(slots=True)
class _Call:
    keys: Sequence[str]
    args: Sequence[_Arg]
    done: asyncio.Future[object] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AppendBatcher:
    def __init__(
        self, redis: aioredis.Redis, source: str, *, batching: bool = True, max_batch: int = 512
    ) -> None:
        self._redis = redis
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's id
        self._batching = batching
        self._max_batch = max_batch
        self._queued: list[_Call] = []
        self._sending: list[_Call] = []  # the batch out now
        self._flusher: asyncio.Task[None] | None = None

    async def append(self, keys: Sequence[str], args: Sequence[_Arg]) -> object:
        """The script's result for these keys and args (sent with the others queued)."""
        call = _Call(keys, args)
        if not self._batching:
            return _value((await self._send([call]))[0])
        self._queued.append(call)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await call.done

    async def close(self) -> None:
        """Stop flushing; an append still waiting fails (the bus is closed) instead of
        waiting for ever."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
        for call in [*self._sending, *self._queued]:
            if not call.done.done():
                call.done.set_exception(RedisConnectionError("the bus is closed"))
        self._queued = []

    async def _flush(self) -> None:
        """Send what is queued, then what was queued meanwhile, until nothing is."""
        while self._queued:
            batch, self._queued = self._queued[: self._max_batch], self._queued[self._max_batch :]
            self._sending = batch
            try:
                results = await self._send(batch)
            except Exception as e:  # the connection: every caller of the batch sees it
                for call in batch:
                    if not call.done.done():
                        call.done.set_exception(e)
                continue
            for call, result in zip(batch, results, strict=True):
                if call.done.done():
                    continue
                if isinstance(result, Exception):
                    call.done.set_exception(result)
                else:
                    call.done.set_result(result)

    async def _send(self, batch: list[_Call]) -> list[object]:
        results = await self._pipeline(batch)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            await self._redis.script_load(self._source)
            again = await self._pipeline([batch[i] for i in missing])
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        return results  # (a call's own error, as an exception in its place)

    async def _pipeline(self, batch: list[_Call]) -> list[object]:
        pipe = self._redis.pipeline(transaction=False)
        for call in batch:
            pipe.evalsha(self._sha, len(call.keys), *call.keys, *call.args)
        return list(await pipe.execute(raise_on_error=False))


def _value(result: object) -> object:
    if isinstance(result, Exception):
        raise result
    return result
