"""The in-process bus's write marks: when each user's latest write stops being recent."""

from __future__ import annotations

from parley.bus.memory.shared import _MemoryOps

_PRUNE_AT = 10_000  # marks kept before the lapsed ones are swept out


class _WriteOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._writes: dict[str, float] = {}  # user -> when the mark lapses

    async def mark_write(self, user_id: str, *, ttl: float) -> None:
        now = self._clock()
        if len(self._writes) >= _PRUNE_AT:
            self._writes = {u: until for u, until in self._writes.items() if until > now}
        self._writes[user_id] = max(self._writes.get(user_id, now), now + ttl)

    async def wrote_recently(self, user_id: str) -> bool:
        until = self._writes.get(user_id)
        if until is None:
            return False
        if until <= self._clock():
            del self._writes[user_id]
            return False
        return True
