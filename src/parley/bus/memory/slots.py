"""The in-process bus's per-user stream slots: how many SSE streams a user has open."""

from __future__ import annotations

from parley.bus.memory.shared import _MemoryOps


class _SlotOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._slots: dict[str, dict[str, float]] = {}  # user -> stream id -> expiry

    async def open_stream(self, user_id: str, stream_id: str, *, limit: int, ttl: float) -> bool:
        now = self._clock()
        slots = {k: v for k, v in self._slots.get(user_id, {}).items() if v > now}
        if stream_id not in slots and len(slots) >= limit:
            self._slots[user_id] = slots
            return False
        slots[stream_id] = now + ttl
        self._slots[user_id] = slots
        return True

    async def close_stream(self, user_id: str, stream_id: str) -> None:
        slots = self._slots.get(user_id)
        if slots is not None:
            slots.pop(stream_id, None)
            if not slots:
                del self._slots[user_id]
