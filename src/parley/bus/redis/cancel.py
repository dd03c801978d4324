"""The Redis bus's cancel signals.

``ns:run:{<run_id>}:cancel``
    The cancel flag (a string with a TTL of ``cancel_ttl_seconds``).
``ns:cancels``
    The channel a request publishes the run's id on, with the flag, in one script: each
    process's waiters listen to it through one subscription (``cancel_watch.py``).
``ns:run:{<run_id>}:cancelq``
    A one-item list pushed with the flag, expiring with it, for the workers of the release
    before this one (they ``BLPOP`` on it) while an upgrade replaces them (docs/DEPLOY.md:
    the previous release's workers keep working until replaced); to drop in the next one.
"""

from __future__ import annotations

from parley.bus.redis.cancel_watch import CancelWatch
from parley.bus.redis.shared import _Arg, _LuaScript, _ms, _RedisOps

# KEYS: cancel flag, the previous release's wake-up list. ARGV: ttl ms, channel, run id.
_REQUEST_CANCEL = """
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""


class _CancelOps(_RedisOps):
    _request_cancel = _LuaScript(_REQUEST_CANCEL)
    _cancel_watch: CancelWatch

    def _cancel_channel(self) -> str:
        return f"{self._ns}:cancels"

    async def request_cancel(self, run_id: str) -> None:
        ttl_ms = _ms(self.limits.cancel_ttl_seconds)
        args: list[_Arg] = [ttl_ms, self._cancel_channel(), run_id]
        keys = [self._run_key(run_id, "cancel"), self._run_key(run_id, "cancelq")]
        await self._request_cancel(keys=keys, args=args)

    async def cancel_requested(self, run_id: str) -> bool:
        return bool(await self._redis.exists(self._run_key(run_id, "cancel")))

    async def cancels_requested(self, run_ids: list[str]) -> list[bool]:
        """``cancel_requested`` of each run, in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.exists(self._run_key(run_id, "cancel"))
            return [bool(n) for n in await pipe.execute()]

    async def wait_cancel(self, run_id: str, timeout: float) -> bool:
        return await self._cancel_watch.wait(run_id, timeout, self.cancel_requested)
