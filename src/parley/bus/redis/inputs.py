"""The Redis bus's run inputs: a temporary chat's conversation, kept only here.

``ns:run:{<run_id>}:input``
    The run's input (``runs/inputs.py``'s JSON), a string with the TTL it was kept for;
    deleted when the run ends.
"""

from __future__ import annotations

from parley.bus.redis.shared import _ms, _RedisOps


class _InputOps(_RedisOps):
    async def keep_input(self, run_id: str, text: str, *, ttl: float) -> None:
        await self._redis.set(self._run_key(run_id, "input"), text, px=_ms(ttl))

    async def run_input(self, run_id: str) -> str | None:
        found = await self._redis.get(self._run_key(run_id, "input"))
        return None if found is None else str(found)  # (the client decodes responses)

    async def forget_input(self, run_id: str) -> None:
        await self._redis.delete(self._run_key(run_id, "input"))
