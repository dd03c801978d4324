"""The Redis bus's per-user token budgets (token buckets).

``ns:user:{<user_id>}:budget``
    The user's token bucket: a hash of ``t`` (the balance, fractional, negative after an
    overrun) and ``at`` (server ms it was taken at). Refill is computed from Redis ``TIME``
    inside the one script that reads or changes it, so every process agrees on the clock. A
    missing key is a full bucket: a change that fills it deletes the key, and the key
    expires when it would have refilled anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

from parley.bus.interface import TokenBalance, TokenBucket, TokenReservation
from parley.bus.redis.shared import _Arg, _LuaScript, _RedisOps, _text

# KEYS: the user's bucket. ARGV: capacity, tokens per minute, op ('reserve' | 'settle' |
# 'peek'), n (reserve: the amount; settle: reserved - used). Returns {1 if taken (or
# written), the balance as a decimal string} (a Lua number would be truncated to an integer).
_BUDGET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2]) / 60000
local tokens = cap
local stored = redis.call('HMGET', KEYS[1], 't', 'at')
if stored[1] then
  tokens = math.min(cap, tonumber(stored[1]) + math.max(0, now - tonumber(stored[2])) * rate)
end
local op, n = ARGV[3], tonumber(ARGV[4])
if op == 'peek' then
  return {1, string.format('%.6f', tokens)}
elseif op == 'reserve' then
  if tokens < n then
    return {0, string.format('%.6f', tokens)}
  end
  tokens = tokens - n
elseif op == 'settle' then
  tokens = math.min(cap, tokens + n)
else
  return redis.error_reply('parley: unknown budget op')
end
if tokens >= cap then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'at', string.format('%.3f', now))
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((cap - tokens) / rate) + 1000))
end
return {1, string.format('%.6f', tokens)}
"""

_BudgetOp = Literal["reserve", "settle", "peek"]


class _BudgetOps(_RedisOps):
    _budget = _LuaScript(_BUDGET)

    def _budget_key(self, user_id: str) -> str:
        return self._user_key(user_id, "budget")

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        taken, tokens = await self._bucket_op(user_id, bucket, "reserve", amount)
        balance = TokenBalance(tokens, bucket)
        if taken:
            return TokenReservation(True, balance)
        return TokenReservation(False, balance, bucket.seconds_until(tokens, amount))

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        _, tokens = await self._bucket_op(user_id, bucket, "settle", reserved - used)
        return TokenBalance(tokens, bucket)

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        _, tokens = await self._bucket_op(user_id, bucket, "peek", 0)
        return TokenBalance(tokens, bucket)

    async def _bucket_op(
        self, user_id: str, bucket: TokenBucket, op: _BudgetOp, n: int
    ) -> tuple[bool, float]:
        args: list[_Arg] = [bucket.capacity, bucket.per_minute, op, n]
        reply = await self._budget(keys=[self._budget_key(user_id)], args=args)
        taken, tokens = cast(Sequence[object], reply)
        return bool(int(_text(taken))), float(_text(tokens))
