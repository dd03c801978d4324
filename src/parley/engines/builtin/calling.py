"""Tool calls on the built-in engine: a fixed call format the prompt explains, decoding
constrained to it, and the calls read back out of the generated text as OpenAI's fragments.

The format is the one Hermes- and Qwen-style templates teach::

    <tool_call>
    {"name":"get_weather","arguments":{"city":"Rome"}}
    </tool_call>

A model whose chat template explains that format itself (it takes ``tools`` and names
``<tool_call>``) is given the tools through its template; any other gets them in a system
message written here, and its conversation's earlier calls and results written in the same
format (calls in the assistant's turn, results as ``<tool_response>`` in a user turn).

The grammar (llguidance's Lark syntax, each function's arguments an inline JSON schema)
decides what the model may write: ``required`` or a named function — calls only, each call's
arguments valid for its function's schema; ``auto`` — either an answer (text that does not
begin with ``<tool_call>``, or JSON under the request's response format) or calls from the
first token on. ``parallel_tool_calls: false`` allows one call. ``CallReader`` turns the
text of calls into ``ToolCallDelta`` fragments as they are written: the id and name once
the name is whole, then the arguments piece by piece.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.engines.builtin.schemas import arguments_schema, schema_of
from parley.engines.interface import ChatMessage
from parley.engines.tools import OutputSpec, ResponseFormat, ToolCallDelta, ToolSpec, ToolUse

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
HEAD = OPEN + '\n{"name":"'
AFTER_NAME = '","arguments":'
TAIL = "}\n" + CLOSE
BETWEEN = ""

INSTRUCTIONS = (
    "You may call functions to help with the user's request. Their signatures, as JSON "
    "Schema, are within <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with only a JSON object holding its name and arguments "
    "within <tool_call></tool_call> tags, one per call:\n"
    '<tool_call>\n{{"name":"<function-name>","arguments":<arguments-object>}}\n</tool_call>\n'
    "A function's result comes back within <tool_response></tool_response> tags."
)


def offered(output: OutputSpec) -> ToolUse | None:
    """The tools the model may call now (None: none, or ``tool_choice: none``)."""
    tools = output.tools
    if tools is None or tools.choice == "none":
        return None
    return tools


def calls_only(tools: ToolUse) -> bool:
    """Whether the answer can only be calls (``required``, or a named function)."""
    return tools.choice not in (None, "auto")


# -- the prompt -----------------------------------------------------------------------------


def template_explains_calls(template: str | None) -> bool:
    """Whether a chat template takes ``tools`` and teaches this module's call format."""
    return template is not None and "tools" in template and OPEN in template


def template_messages(
    messages: Sequence[ChatMessage], output: OutputSpec, *, native: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages as the chat template takes them, and the ``tools`` to hand it (None:
    the template is not given tools). ``native``: the template explains the format."""
    tools = offered(output)
    if native:
        return [_native(m) for m in messages], (
            None if tools is None else [t.model_dump(exclude_none=True) for t in tools.tools]
        )
    out = _written(messages)
    if tools is not None:
        out = _with_instructions(out, tools.tools)
    return out, None


def _native(m: ChatMessage) -> dict[str, Any]:
    """A message as Hugging Face templates take it (arguments as an object)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c.arguments)},
            }
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _written(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Calls written into their assistant turn, results into user turns (consecutive results
    in one), for a template that knows neither."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            text = f"<tool_response>\n{m.content}\n</tool_response>"
            if out and out[-1].get("_results"):
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text, "_results": True})
            continue
        content = m.content
        if m.tool_calls:
            calls = BETWEEN.join(call_text(c.name, c.arguments) for c in m.tool_calls)
            content = f"{content}\n{calls}" if content else calls
        out.append({"role": m.role, "content": content})
    return [{"role": m["role"], "content": m["content"]} for m in out]


def call_text(name: str, arguments: str) -> str:
    """One call as the format writes it."""
    return f"{HEAD}{name}{AFTER_NAME}{arguments or '{}'}{TAIL}"


def _with_instructions(
    messages: list[dict[str, Any]], tools: Sequence[ToolSpec]
) -> list[dict[str, Any]]:
    listed = "\n".join(
        json.dumps(t.function.model_dump(exclude_none=True), ensure_ascii=False) for t in tools
    )
    text = INSTRUCTIONS.format(tools=listed)
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{"role": "system", "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


# -- the grammar ------------------------------------------------------------------------------


def call_grammar(tools: ToolUse, answer: ResponseFormat | None) -> str:
    """The Lark grammar of an answer under ``tools`` (``answer``: the response format a
    text answer follows instead, under ``auto``)."""
    choice = tools.choice
    named = choice.function.name if choice is not None and not isinstance(choice, str) else None
    specs = [t for t in tools.tools if named is None or t.function.name == named]
    lines = [f"call: {' | '.join(f'call_{i}' for i in range(len(specs)))}"]
    for i, spec in enumerate(specs):
        head = json.dumps(HEAD + spec.function.name + AFTER_NAME)
        lines.append(f"call_{i}: {head} args_{i} {json.dumps(TAIL)}")
        lines.append(f"args_{i}: %json {json.dumps(arguments_schema(spec))}")
    one_or_more = "call" if tools.parallel is False else f"call ({json.dumps(BETWEEN)} call)*"
    lines.append(f"calls: {one_or_more}")
    if calls_only(tools):
        lines.append("start: calls")
    else:
        lines.append("start: answer | calls")
        lines.append(_answer_rule(answer))
    return "\n".join(lines) + "\n"


def _answer_rule(answer: ResponseFormat | None) -> str:
    if answer is not None and answer.structured:
        return f"answer: %json {json.dumps(schema_of(answer))}"
    return f"answer: TEXT\nTEXT: /{not_starting_with(OPEN)}/"


def not_starting_with(prefix: str) -> str:
    """A regex (no lookarounds: Rust's ``regex``) for any text, the empty text included,
    that does not begin with ``prefix``."""
    alternatives = [
        re.escape(prefix[:i]) + f"[^{re.escape(prefix[i])}]" for i in range(len(prefix))
    ]
    prefixes = [re.escape(prefix[:i]) for i in range(1, len(prefix))]
    return f"({'|'.join(alternatives)})(.|\\n)*|{'|'.join(prefixes)}|"


# -- reading the calls back -------------------------------------------------------------------


class _Mode:
    UNDECIDED = 0
    TEXT = 1
    CALLS = 2


@dataclass(slots=True)
class CallReader:
    """The generated text of one answer, split into its text and its calls' fragments as
    it comes. ``calls_only``: the answer can only be calls (``required`` or named)."""

    calls_only: bool = False
    mode: int = _Mode.UNDECIDED
    _pending: str = ""  # text not yet read: part of a literal, or the start of a name
    _step: str = "head"  # head | name | arguments | tail | between
    _depth: int = 0
    _in_string: bool = False
    _escaped: bool = False
    _index: int = -1
    calls: int = 0

    def feed(self, text: str) -> tuple[str, tuple[ToolCallDelta, ...]]:
        """The answer text and the call fragments ``text`` makes."""
        if self.mode == _Mode.TEXT:
            return text, ()
        if self.mode == _Mode.UNDECIDED:
            seen = self._pending + text
            if not self.calls_only and not seen.startswith(OPEN) and not OPEN.startswith(seen):
                self.mode, self._pending = _Mode.TEXT, ""
                return seen, ()
            if len(seen) < len(OPEN) and not self.calls_only:
                self._pending = seen
                return "", ()
            self.mode, self._pending, text = _Mode.CALLS, "", seen
        return "", self._calls(text)

    def finish(self) -> str:
        """Text held back when the answer ended (an answer that was only ``<tool``)."""
        held, self._pending = (self._pending, "") if self.mode == _Mode.UNDECIDED else ("", "")
        return held

    def _calls(self, text: str) -> tuple[ToolCallDelta, ...]:
        """The fragments of calls ``text`` continues (the grammar keeps it to the format;
        ValueError if it did not)."""
        out: list[ToolCallDelta] = []
        self._pending += text
        while self._pending:
            before = (self._pending, self._step)
            piece = getattr(self, f"_read_{self._step}")()
            if piece is not None and (piece.name is not None or piece.arguments):
                out.append(piece)
            if (self._pending, self._step) == before:
                break
        return tuple(out)

    def _literal(self, literal: str, then: str) -> None:
        got = self._pending
        if got.startswith(literal):
            self._pending, self._step = got[len(literal) :], then
        elif not literal.startswith(got):
            raise ValueError(f"the model left its call format: {got[:40]!r}")

    def _read_head(self) -> None:
        self._literal(HEAD, "name")

    def _read_between(self) -> None:
        self._literal(BETWEEN, "head")

    def _read_tail(self) -> None:
        self._literal(TAIL, "between")

    def _read_name(self) -> ToolCallDelta | None:
        end = self._pending.find(AFTER_NAME)
        if end < 0:
            return None
        name, self._pending = self._pending[:end], self._pending[end + len(AFTER_NAME) :]
        self._step, self._depth, self._in_string, self._escaped = "arguments", 0, False, False
        self._index += 1
        self.calls += 1
        return ToolCallDelta(self._index, f"call_{secrets.token_hex(12)}", name, "")

    def _read_arguments(self) -> ToolCallDelta:
        text, end = self._pending, len(self._pending)
        for i, char in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                continue
            if char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    end = i + 1
                    self._step = "tail"
                    break
        self._pending = text[end:]
        return ToolCallDelta(self._index, arguments=text[:end])
