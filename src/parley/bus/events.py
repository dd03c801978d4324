"""The events of a run's stream as the bus carries them (``interface.py``: the contract)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class EventKind(StrEnum):  # the SSE event names of a run's stream
    STATUS = "status"
    DELTA = "delta"
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    LOGPROBS = "logprobs"
    TOOL_RESULT = "tool_result"
    TOOL_CONFIRM = "tool_confirm"
    TOOL_ANSWER = "tool_answer"
    ERROR = "error"
    DONE = "done"


class RunEvent:
    """One event of a run's stream: its kind and its data (a JSON object).

    A bus keeps events as JSON text and hands them out with it (``encoded``): ``data`` is
    decoded from it only when read, and ``json`` is that text as it was stored, so a relay
    writes it to its clients without decoding and encoding each token again."""

    __slots__ = ("_data", "_json", "kind")

    def __init__(self, kind: EventKind, data: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self._data: dict[str, Any] | None = {} if data is None else data
        self._json: str | None = None

    @classmethod
    def encoded(cls, kind: EventKind, json_text: str) -> RunEvent:
        """An event read back from its JSON text (decoded when ``data`` is first read)."""
        event = cls.__new__(cls)
        event.kind, event._data, event._json = kind, None, json_text
        return event

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            assert self._json is not None
            self._data = json.loads(self._json)
        return self._data

    @property
    def json(self) -> str:
        """The data as compact JSON text (non-ASCII kept as it is)."""
        if self._json is None:
            self._json = json.dumps(self._data, separators=(",", ":"), ensure_ascii=False)
        return self._json

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunEvent):
            return NotImplemented
        return self.kind is other.kind and self.data == other.data

    __hash__ = None  # type: ignore[assignment]  # mutable data, as a dataclass's would be

    def __repr__(self) -> str:
        return f"RunEvent({self.kind!r}, {self.data!r})"


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One event of a run's stream; ``id`` is the SSE event id (ordered, opaque)."""

    id: str
    event: RunEvent
