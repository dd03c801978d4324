"""Appends to run streams batched: one round trip to Redis per flush for every run a worker
is generating, instead of one per token per run.

``append()`` queues the append script's call and waits for its own result. One flusher task
sends what is queued as ONE script call (the batch script runs the append script's body once
per queued call, in order, each with its own fence check, and answers a result for each), and
as soon as that round trip is back, what was queued meanwhile (group commit): an append alone
goes out at once, as before, and under load the appends of every run wait at most one round
trip and share the next. At most ``max_batch`` calls a batch. One script call rather than a
pipeline of one per append: Redis parses and runs one command, and the client packs one and
parses one reply, instead of hundreds. (All of a batch's keys must live on one node, as the
stream tail's ``XREAD`` already needs: one Redis, not Redis Cluster.) ``batching`` off: each
append is its own round trip (the previous behaviour, kept for comparison).

A script unknown to the server (``NOSCRIPT``: Redis restarted, or a fresh one) is loaded and
the call sent again. A connection error fails every append of the batch (each caller sees
it, as a single append would); a call's own error (a wrong key type, say) fails that call
alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from parley.bus.redis.shared import _Arg


class _Call:
    __slots__ = ("args", "done", "keys")

    def __init__(
        self, keys: Sequence[str], args: Sequence[_Arg], done: asyncio.Future[object]
    ) -> None:
        self.keys = keys
        self.args = args
        self.done = done


class AppendBatcher:
    def __init__(
        self,
        redis: aioredis.Redis,
        source: str,
        *,
        shared: Sequence[_Arg] = (),
        batching: bool = True,
        max_batch: int = 512,
    ) -> None:
        # redis-py's scripts: EVALSHA, and on NOSCRIPT the script loaded and sent again
        self._one = redis.register_script(source)
        self._many = redis.register_script(_batch_script(source))
        self._shared = list(shared)  # the args every call ends with, sent once a batch
        self._batching = batching
        self._max_batch = max_batch
        self._queued: list[_Call] = []
        self._sending: list[_Call] = []  # the batch out now
        self._flusher: asyncio.Task[None] | None = None

    async def append(self, keys: Sequence[str], args: Sequence[_Arg]) -> object:
        """The script's result for these keys and args (sent with the others queued)."""
        call = _Call(keys, args, asyncio.get_running_loop().create_future())
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
        if len(batch) == 1:
            call = batch[0]
            try:
                return [await self._one(keys=call.keys, args=[*call.args, *self._shared])]
            except ResponseError as e:  # the call's own error, as the batch script gives it
                return [e]
        keys: list[str] = []
        args: list[_Arg] = [len(batch[0].keys), len(batch[0].args), len(self._shared)]
        args += self._shared
        for call in batch:
            keys += call.keys
            args += call.args
        replies = await self._many(keys=keys, args=args)
        return [_result(reply) for reply in cast(list[object], replies)]


def _value(result: object) -> object:
    if isinstance(result, Exception):
        raise result
    return result


_REFUSED = ""  # the batch script's answer for a call whose script answered false
_ERROR = "ERR "  # ... and the prefix of one whose script raised an error


def _batch_script(source: str) -> str:
    """A script that runs ``source`` (written for one call: KEYS, ARGV, returning a string or
    false) once per call of a batch. ARGV[1], ARGV[2] and ARGV[3]: the keys and args per
    call and the shared args, then the shared args (which end every call's ARGV), then each
    call's own args in order; KEYS: each call's keys in order. Answers an array: each
    call's string, ``_REFUSED`` for false, or ``_ERROR`` and the message of its error."""
    return f"""
local function one(KEYS, ARGV)
{source}
end
local nk, na, ns = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {{}}
for i = 0, (#ARGV - 3 - ns) / na - 1 do
  local keys, args = {{}}, {{}}
  for j = 1, nk do keys[j] = KEYS[i * nk + j] end
  for j = 1, na do args[j] = ARGV[3 + ns + i * na + j] end
  for j = 1, ns do args[na + j] = ARGV[3 + j] end
  local ok, res = pcall(one, keys, args)
  if not ok then
    if type(res) == 'table' and res.err then res = res.err end
    out[i + 1] = '{_ERROR}' .. tostring(res)
  elseif res then
    out[i + 1] = res
  else
    out[i + 1] = '{_REFUSED}'
  end
end
return out
"""


def _result(reply: object) -> object:
    """One call's result from the batch script's answer (see ``_batch_script``)."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    if text == _REFUSED:
        return None
    if isinstance(text, str) and text.startswith(_ERROR):
        return ResponseError(text.removeprefix(_ERROR))
    return text
