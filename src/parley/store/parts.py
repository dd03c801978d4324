"""What a message holds beyond its text: an answer's reasoning (shown folded, stored apart
from the answer, never fed back into a prompt) and its tool calls, and the call a tool's
result answers. One JSON column (``messages.parts``; NULL when it holds none), read and
written only through ``MessageParts``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from parley.engines.interface import ChatMessage
from parley.engines.tools import ToolCall


@dataclass(frozen=True, slots=True)
class ToolStep:
    """A server-side tool's run within an answer: the call, how it went, what it gave."""

    call: ToolCall
    status: str
    result: str

    def wire(self) -> dict[str, Any]:
        return {**self.call.wire(), "status": self.status, "result": self.result}


@dataclass(frozen=True, slots=True)
class MessageParts:
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()  # calls for the caller to run (``/v1``'s)
    tool_call_id: str | None = None
    steps: tuple[ToolStep, ...] = ()  # calls the server ran, with their results

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.tool_calls or self.tool_call_id or self.steps)

    def wire(self) -> dict[str, Any]:
        """As the API, exports and archives carry it: only what it holds."""
        out: dict[str, Any] = {}
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [c.wire() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.steps:
            out["tool_steps"] = [s.wire() for s in self.steps]
        return out

    def to_json(self) -> str | None:
        return json.dumps(self.wire(), separators=(",", ":"), ensure_ascii=False) if self else None

    @classmethod
    def from_wire(cls, data: dict[str, Any] | None) -> MessageParts:
        """From ``wire``'s shape (ValueError for a malformed one)."""
        if not data:
            return cls()
        calls = tuple(_call(c) for c in data.get("tool_calls") or ())
        steps = tuple(_step(s) for s in data.get("tool_steps") or ())
        reasoning, call_id = data.get("reasoning"), data.get("tool_call_id")
        if reasoning is not None and not isinstance(reasoning, str):
            raise ValueError("reasoning is a string")
        if call_id is not None and not isinstance(call_id, str):
            raise ValueError("tool_call_id is a string")
        return cls(reasoning or None, calls, call_id, steps)

    @classmethod
    def from_json(cls, text: str | None) -> MessageParts:
        return cls.from_wire(json.loads(text)) if text else cls()


def prompt_message(role: str, content: str, parts: MessageParts) -> ChatMessage:
    """A stored message as a prompt carries it: its text and its calls, or the call it
    answers — never its reasoning."""
    return ChatMessage(role, content, parts.tool_calls, parts.tool_call_id)


def counted_text(content: str, parts: MessageParts) -> str:
    """What a stored message's tokens are counted from: its text and its calls."""
    return content + "".join(c.name + c.arguments for c in parts.tool_calls)


def _step(data: Any) -> ToolStep:
    status, result = data.get("status"), data.get("result")
    if not (isinstance(status, str) and isinstance(result, str)):
        raise ValueError("a tool step has a status and a result, each a string")
    return ToolStep(_call(data), status, result)


def _call(data: Any) -> ToolCall:
    function = data.get("function") if isinstance(data, dict) else None
    if not isinstance(function, dict):
        raise ValueError("a tool call has its function")
    call_id, name, arguments = data.get("id"), function.get("name"), function.get("arguments")
    if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        raise ValueError("a tool call has an id, a name and arguments, each a string")
    return ToolCall(call_id, name, arguments)
