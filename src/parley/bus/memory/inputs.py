"""The in-process bus's run inputs: a temporary chat's conversation, kept only here."""

from __future__ import annotations

from parley.bus.memory.shared import _MemoryOps

_PRUNE_AT = 10_000  # inputs kept before the lapsed ones are swept out


class _InputOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._inputs: dict[str, tuple[str, float]] = {}  # run -> its input, when it lapses

    async def keep_input(self, run_id: str, text: str, *, ttl: float) -> None:
        now = self._clock()
        if len(self._inputs) >= _PRUNE_AT:
            self._inputs = {r: kept for r, kept in self._inputs.items() if kept[1] > now}
        self._inputs[run_id] = (text, now + ttl)

    async def run_input(self, run_id: str) -> str | None:
        kept = self._inputs.get(run_id)
        if kept is None:
            return None
        if kept[1] <= self._clock():
            del self._inputs[run_id]
            return None
        return kept[0]

    async def forget_input(self, run_id: str) -> None:
        self._inputs.pop(run_id, None)
