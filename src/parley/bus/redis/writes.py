"""The Redis bus's write marks (read-your-writes across processes: ``store/routing.py``).

``ns:user:{<user_id>}:wrote``
    Set while the user's latest write is recent (a string with the mark's TTL); a later
    mark that lapses sooner never shortens it.
"""

from __future__ import annotations

from parley.bus.redis.shared import _LuaScript, _ms, _RedisOps

# KEYS: the mark. ARGV: ttl ms. Extends the mark, never shortens it.
_MARK = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
"""


class _WriteOps(_RedisOps):
    _mark = _LuaScript(_MARK)

    async def mark_write(self, user_id: str, *, ttl: float) -> None:
        await self._mark(keys=[self._user_key(user_id, "wrote")], args=[_ms(ttl)])

    async def wrote_recently(self, user_id: str) -> bool:
        return bool(await self._redis.exists(self._user_key(user_id, "wrote")))
