"""The Redis bus's attempt throttles (logins, sign-ups).

``ns:throttle:{<digest>}:attempts``
    One throttle record: a hash of ``n`` (attempts) and ``at`` (server ms the latest went
    ahead: a held attempt goes ahead up to ``max_delay`` later than it came).
    The digest is SHA-256 of the caller's key (which names an email and an address: not kept
    in Redis in the clear), and the hash tag. The record expires ``backoff.lifetime`` after
    its latest attempt went ahead; the schedule is checked and the attempt recorded in one
    script, on Redis ``TIME``, so every api process sees one count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import cast

from parley.bus.interface import Attempt, Backoff
from parley.bus.redis.shared import _Arg, _LuaScript, _ms, _RedisOps, _text

# KEYS: the record. ARGV: free, max delay ms, lifetime ms, refuse (1 | 0). Returns {1 if
# recorded, attempts after, how early it came in ms (at most the max delay) as a decimal
# string}.
_ATTEMPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rec = redis.call('HMGET', KEYS[1], 'n', 'at')
local n = tonumber(rec[1]) or 0
local free = tonumber(ARGV[1])
local max_delay = tonumber(ARGV[2])
local wait = 0
if n >= free then
  local delay = math.min(1000 * 2 ^ math.min(n - free, 64), max_delay)
  wait = math.min(math.max(0, tonumber(rec[2]) + delay - now), max_delay)
end
if wait > 0 and ARGV[4] == '1' then
  return {0, n, string.format('%.3f', wait)}
end
redis.call('HSET', KEYS[1], 'n', n + 1, 'at', string.format('%.3f', now + wait))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil(tonumber(ARGV[3]) + wait)))
return {1, n + 1, string.format('%.3f', wait)}
"""


class _ThrottleOps(_RedisOps):
    _attempt = _LuaScript(_ATTEMPT)

    def _throttle_key(self, key: str) -> str:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self._key("throttle", digest, "attempts")

    async def attempt(self, key: str, backoff: Backoff, *, refuse: bool = True) -> Attempt:
        args: list[_Arg] = [
            backoff.free,
            _ms(backoff.max_delay),
            _ms(backoff.lifetime),
            1 if refuse else 0,
        ]
        reply = await self._attempt(keys=[self._throttle_key(key)], args=args)
        allowed, attempts, wait_ms = cast(Sequence[object], reply)
        return Attempt(
            bool(int(_text(allowed))), int(_text(attempts)), float(_text(wait_ms)) / 1000
        )

    async def forget_attempts(self, key: str) -> None:
        await self._redis.delete(self._throttle_key(key))

    async def attempts(self, key: str) -> int:
        found = await self._redis.hget(self._throttle_key(key), "n")
        return 0 if found is None else int(_text(found))
