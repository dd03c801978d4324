"""The tool contract: a function the model may call (its OpenAI function spec), run with the
caller's context and a deadline, ending in a ``ToolOutcome`` — never an exception for what
the tool's input or the world did wrong (a refused address, a page too large, a timeout):
those are outcomes the model and the user are told about."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from parley.engines.tools import ToolSpec


class ToolStatus(StrEnum):
    OK = "ok"
    ERROR = "error"  # the tool ran and failed (a 404, a page that is not text)
    REFUSED = "refused"  # the call was not made (a private address, bad arguments)
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Whom a call is made for: the run's user (a tool reads only their own data)."""

    user_id: str
    chat_id: str | None
    run_id: str
    message_id: str | None = None  # the user message the run answers


@dataclass(frozen=True, slots=True)
class ToolFile:
    """A file a tool made (``run_python``'s writes): kept as an attachment of the answer."""

    name: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: ToolStatus
    content: str  # what the model is given (bounded by the tool)
    files: tuple[ToolFile, ...] = ()

    @classmethod
    def refused(cls, why: str) -> ToolOutcome:
        return cls(ToolStatus.REFUSED, why)

    @classmethod
    def error(cls, why: str) -> ToolOutcome:
        return cls(ToolStatus.ERROR, why)


class Tool(Protocol):
    @property
    def spec(self) -> ToolSpec:
        """The function the model sees: its name, description and JSON schema."""
        ...

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome: ...
