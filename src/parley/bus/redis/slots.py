"""The Redis bus's per-user slots: how many SSE streams a user has open, and how many runs a
user has in flight (queued or running).

``ns:user:{<user_id>}:streams``
    The user's open SSE streams: a sorted set of stream id -> expiry (server ms).
``ns:user:{<user_id>}:runs``
    The user's runs in flight: a sorted set of run id -> expiry (server ms).
"""

from __future__ import annotations

from parley.bus.redis.shared import _Arg, _LuaScript, _ms, _RedisOps

# KEYS: the user's slots. ARGV: id, limit (-1: only refresh a slot held), ttl ms. Returns 1
# if the slot is held.
_HOLD_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
local limit = tonumber(ARGV[2])
if not held and (limit < 0 or redis.call('ZCARD', KEYS[1]) >= limit) then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(last[2]) - now))
return 1
"""


class _SlotOps(_RedisOps):
    _hold_slot = _LuaScript(_HOLD_SLOT)

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        return await self._hold(self._user_key(user_id, "streams"), stream_id, limit, ttl)

    async def close_stream(self, user_id: str, stream_id: str) -> None:
        await self._redis.zrem(self._user_key(user_id, "streams"), stream_id)

    async def hold_user_run(self, user_id: str, run_id: str, *, limit: int, ttl: float) -> bool:
        return await self._hold(self._user_key(user_id, "runs"), run_id, limit, ttl)

    async def refresh_user_run(self, user_id: str, run_id: str, *, ttl: float) -> bool:
        return await self._hold(self._user_key(user_id, "runs"), run_id, -1, ttl)

    async def release_user_run(self, user_id: str, run_id: str) -> None:
        await self._redis.zrem(self._user_key(user_id, "runs"), run_id)

    async def _hold(self, key: str, member: str, limit: int, ttl: float) -> bool:
        args: list[_Arg] = [member, limit, _ms(ttl)]
        return bool(await self._hold_slot(keys=[key], args=args))
