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
from dataclasses import dataclass
from typing import Any

from parley.engines.interface import ChatMessage


@dataclass(frozen=True, slots=True)
class RunInput:
    messages: list[ChatMessage]

    def to_json(self) -> str:
        messages = [{"role": m.role, "content": m.content} for m in self.messages]
        return json.dumps({"messages": messages}, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RunInput:
        """(Runs made before ``runs.sampling`` also hold their stop, top_p and seed here:
        migration 0015 carried them over, and they are not read again.)"""
        data: dict[str, Any] = json.loads(text)
        return cls(messages=[ChatMessage(m["role"], m["content"]) for m in data["messages"]])

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
        return sum(len(m.content) for m in self.messages)
