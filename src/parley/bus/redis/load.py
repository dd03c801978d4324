"""The Redis bus's load per model: runs in flight, the slots engines offer, and when runs
ended (for the drain rate). One script reads or changes them, on Redis's clock.

``ns:model:{<model>}:runs``
    Runs in flight (queued or running): a sorted set of run id -> expiry (server ms).
``ns:model:{<model>}:offers`` and ``ns:model:{<model>}:slots``
    The engines that serve the model: a sorted set of source -> expiry (server ms), and a
    hash of source -> slots.
``ns:model:{<model>}:ends``
    Runs that ended lately: a sorted set of run id -> when (server ms), kept for
    ``DRAIN_MEMORY_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from parley.bus.interface import LoadAdmission, ModelLoad
from parley.bus.redis.shared import _Arg, _LuaScript, _ms, _RedisOps

DRAIN_MEMORY_SECONDS = 300.0

# KEYS: runs, offers, slots, ends. ARGV: op ('admit' | 'refresh' | 'release' | 'offer' |
# 'peek'), window ms, drain memory ms, then admit: run id, max load (-1: none), ttl ms;
# refresh: run id, ttl ms; release: run id,
# drained (0/1); offer: source, slots, ttl ms. Returns {admitted, in flight, slots, drained,
# ms since the oldest of those ended}
# as they were before the op.
_LOAD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function expire(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.max(1, math.floor(tonumber(last[2]) - now)))
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('HDEL', KEYS[3], unpack(gone))
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[3]))
local in_flight = redis.call('ZCARD', KEYS[1])
local slots = 0
for _, v in ipairs(redis.call('HVALS', KEYS[3])) do slots = slots + tonumber(v) end
local since = '(' .. (now - tonumber(ARGV[2]))
local drained = redis.call('ZCOUNT', KEYS[4], since, '+inf')
local oldest = redis.call('ZRANGEBYSCORE', KEYS[4], since, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local span = 0
if oldest[2] then span = now - tonumber(oldest[2]) end
local op = ARGV[1]
local admitted = 1
if op == 'admit' then
  local limit = tonumber(ARGV[5])
  local over = limit >= 0 and slots > 0 and in_flight + 1 > limit * slots
  if over and not redis.call('ZSCORE', KEYS[1], ARGV[4]) then
    admitted = 0
  else
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), ARGV[4])
    expire(KEYS[1])
  end
elseif op == 'refresh' then
  if redis.call('ZSCORE', KEYS[1], ARGV[4]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), ARGV[4])
    expire(KEYS[1])
  else
    admitted = 0
  end
elseif op == 'release' then
  if redis.call('ZREM', KEYS[1], ARGV[4]) == 1 and ARGV[5] == '1' then
    redis.call('ZADD', KEYS[4], now, ARGV[4])
    redis.call('PEXPIRE', KEYS[4], ARGV[3])
  end
elseif op == 'offer' then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  expire(KEYS[2])
  redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[2]))
end
return {admitted, in_flight, slots, drained, span}
"""


class _LoadOps(_RedisOps):
    _load_script = _LuaScript(_LOAD)

    async def admit_run(
        self, model: str, run_id: str, *, max_load: float | None, ttl: float, window: float
    ) -> LoadAdmission:
        limit = -1.0 if max_load is None else max_load
        reply = await self._load(model, "admit", window, run_id, limit, _ms(ttl))
        return LoadAdmission(bool(reply[0]), _model_load(reply, window))

    async def refresh_run(self, model: str, run_id: str, *, ttl: float) -> bool:
        reply = await self._load(model, "refresh", 0, run_id, _ms(ttl))
        return bool(reply[0])

    async def release_run(self, model: str, run_id: str, *, drained: bool) -> None:
        await self._load(model, "release", 0, run_id, int(drained))

    async def offer_capacity(self, model: str, source: str, slots: int, *, ttl: float) -> None:
        await self._load(model, "offer", 0, source, slots, _ms(ttl))

    async def model_load(self, model: str, *, window: float) -> ModelLoad:
        return _model_load(await self._load(model, "peek", window), window)

    async def _load(self, model: str, op: str, window: float, *rest: _Arg) -> Sequence[int]:
        keys = [self._key("model", model, s) for s in ("runs", "offers", "slots", "ends")]
        args: list[_Arg] = [op, _ms(window), _ms(DRAIN_MEMORY_SECONDS), *rest]
        return cast(Sequence[int], await self._load_script(keys=keys, args=args))


def _model_load(reply: Sequence[int], window: float) -> ModelLoad:
    return ModelLoad(int(reply[1]), int(reply[2]), int(reply[3]), window, int(reply[4]) / 1000)
