"""The in-process bus's per-user slots: how many SSE streams a user has open, and how many
runs a user has in flight (queued or running)."""

from __future__ import annotations

from parley.bus.memory.shared import _MemoryOps


class _SlotOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._slots: dict[str, dict[str, float]] = {}  # user -> stream id -> expiry
        self._run_slots: dict[str, dict[str, float]] = {}  # user -> run id -> expiry

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        return self._hold(self._slots, user_id, stream_id, limit, ttl)

    async def close_stream(self, user_id: str, stream_id: str) -> None:
        _release(self._slots, user_id, stream_id)

    async def hold_user_run(self, user_id: str, run_id: str, *, limit: int, ttl: float) -> bool:
        return self._hold(self._run_slots, user_id, run_id, limit, ttl)

    async def refresh_user_run(self, user_id: str, run_id: str, *, ttl: float) -> bool:
        now = self._clock()
        slots = self._run_slots.get(user_id, {})
        if slots.get(run_id, now) <= now:
            return False
        slots[run_id] = now + ttl
        return True

    async def release_user_run(self, user_id: str, run_id: str) -> None:
        _release(self._run_slots, user_id, run_id)

    def _hold(
        self, pool: dict[str, dict[str, float]], user_id: str, key: str, limit: int, ttl: float
    ) -> bool:
        now = self._clock()
        slots = {k: v for k, v in pool.get(user_id, {}).items() if v > now}
        if key not in slots and len(slots) >= limit:
            pool[user_id] = slots
            return False
        slots[key] = now + ttl
        pool[user_id] = slots
        return True


def _release(pool: dict[str, dict[str, float]], user_id: str, key: str) -> None:
    slots = pool.get(user_id)
    if slots is not None:
        slots.pop(key, None)
        if not slots:
            del pool[user_id]
