"""A program's request as a run carries it: its messages (its sampling is the run's own
``sampling`` column, ``engines.sampling.SamplingParams``).

A run made through ``/v1/chat/completions`` brings its whole conversation with it (system
prompt and earlier turns included) rather than pointing at a chat; the run row keeps it as
JSON (``runs.input``) so that whichever worker claims the run, in whatever process, builds
the same prompt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from parley.engines.interface import ChatMessage
from parley.engines.tools import OutputSpec, ToolCall


@dataclass(frozen=True, slots=True)
class RunInput:
    messages: list[ChatMessage]
    # tools offered, response format, reasoning effort (``engines/tools.py``)
    output: OutputSpec = field(default_factory=OutputSpec)

    def to_json(self) -> str:
        body: dict[str, Any] = {"messages": [_message(m) for m in self.messages]}
        output = self.output.model_dump(mode="json", by_alias=True, exclude_none=True)
        if output:
            body["output"] = output
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RunInput:
        """(Runs made before ``runs.sampling`` also hold their stop, top_p and seed here:
        migration 0015 carried them over, and they are not read again.)"""
        data: dict[str, Any] = json.loads(text)
        return cls(
            messages=[_read_message(m) for m in data["messages"]],
            output=OutputSpec.model_validate(data.get("output", {})),
        )

    def counted(self) -> list[ChatMessage]:
        """The messages as their tokens are counted (a run's reservation): each call's name
        and arguments as text, and the tools' definitions as one more system message."""
        out = [
            ChatMessage(m.role, m.content + "".join(c.name + c.arguments for c in m.tool_calls))
            for m in self.messages
        ]
        return out + ([ChatMessage("system", self.tools_text)] if self.output.tools else [])

    @property
    def tools_text(self) -> str:
        """The tools as the prompt carries them (what their tokens are counted from)."""
        tools = self.output.tools
        return "" if tools is None else json.dumps(tools.wire()["tools"])

    def affinity_key(self, user_id: str) -> str:
        """What keeps a program's conversation on one replica: its opening (everything up
        to its first user message), which every later request of that conversation repeats."""
        roles = [m.role for m in self.messages]
        end = roles.index("user") + 1 if "user" in roles else len(roles)
        opening = [[m.role, m.content] for m in self.messages[:end]]
        digest = hashlib.blake2b(
            json.dumps([user_id, opening], ensure_ascii=False).encode("utf-8", "surrogatepass"),
            digest_size=12,
        )
        return f"api:{digest.hexdigest()}"

    @property
    def characters(self) -> int:
        """The prompt's length in characters (what admission estimates its tokens from)."""
        calls = sum(len(c.arguments) + len(c.name) for m in self.messages for c in m.tool_calls)
        return sum(len(m.content) for m in self.messages) + calls + len(self.tools_text)


def _message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [[c.id, c.name, c.arguments] for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _read_message(m: dict[str, Any]) -> ChatMessage:
    calls = tuple(ToolCall(*c) for c in m.get("tool_calls", ()))
    return ChatMessage(m["role"], m["content"], calls, m.get("tool_call_id"))
