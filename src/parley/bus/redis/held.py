"""The Redis bus's renewal of the runs a worker holds: each run's user slot
(``slots.py``) and its count in its model's load (``load.py``) extended together, in one
script call for every run the worker holds (two calls per run before: at a thousand runs,
more of the worker's time than its appends)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.bus.interface import HeldRun
from parley.bus.redis.shared import _Arg, _LuaScript, _ms, _RedisOps

# KEYS: sorted sets of id -> expiry (server ms): a user's runs and a model's runs, in pairs
# (one pair per held run). ARGV: ttl ms, then per pair the member of each. A member still
# counted (not released, not lapsed) is extended to now + ttl, and its set's own expiry with
# it; a member that is not counted stays out (as ``refresh_user_run`` and ``refresh_run``).
_REFRESH_HELD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ = now + tonumber(ARGV[1])
local pruned = {}
for i, key in ipairs(KEYS) do
  if not pruned[key] then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    pruned[key] = true
  end
  if redis.call('ZADD', key, 'XX', 'CH', until_, ARGV[i + 1]) == 1 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', key, math.max(1, math.floor(tonumber(last[2]) - now)))
  end
end
return #KEYS
"""


class _HeldOps(_RedisOps):
    _refresh_held = _LuaScript(_REFRESH_HELD)

    async def refresh_held(self, runs: Sequence[HeldRun], *, ttl: float) -> None:
        if not runs:
            return
        keys: list[str] = []
        args: list[_Arg] = [_ms(ttl)]
        for run in runs:
            keys += [self._user_key(run.user_id, "runs"), self._key("model", run.model, "runs")]
            args += [run.slot, run.run_id]
        await self._refresh_held(keys=keys, args=args)
