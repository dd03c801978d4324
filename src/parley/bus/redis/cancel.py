"""The Redis bus's cancel signals.

``ns:run:{<run_id>}:cancel``
    The cancel flag (a string with a TTL of ``cancel_ttl_seconds``).
``ns:run:{<run_id>}:cancelq``
    A one-item list pushed with the flag so ``wait_cancel`` can BLPOP on it; a waiter that
    pops it pushes it back, so other waiters wake too. It never outlives the flag.
"""

from __future__ import annotations

from parley.bus.redis.shared import _block_seconds, _LuaScript, _ms, _RedisOps

# KEYS: cancel flag, wake-up list. ARGV: ttl ms.
_REQUEST_CANCEL = """
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""

# KEYS: cancel flag, wake-up list. Puts back the wake-up item a waiter popped, expiring
# with the flag. Returns 1 if the flag is set.
_REWAKE = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return 0
end
if ttl > 0 then
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"""


class _CancelOps(_RedisOps):
    _request_cancel = _LuaScript(_REQUEST_CANCEL)
    _rewake = _LuaScript(_REWAKE)

    def _cancel_keys(self, run_id: str) -> list[str]:
        return [self._run_key(run_id, "cancel"), self._run_key(run_id, "cancelq")]

    async def request_cancel(self, run_id: str) -> None:
        ttl_ms = _ms(self.limits.cancel_ttl_seconds)
        await self._request_cancel(keys=self._cancel_keys(run_id), args=[ttl_ms])

    async def cancel_requested(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._run_key(run_id, "cancel")))

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        if await self.cancel_requested(run_id):
            return True
        if timeout <= 0:  # BLPOP 0 would wait forever
            return False
        flag, wake = self._cancel_keys(run_id)
        popped = await self._redis.blpop([wake], _block_seconds(timeout))
        if not popped:
            return await self.cancel_requested(run_id)
        return bool(await self._rewake(keys=[flag, wake], args=[]))
