"""Tools a request offers the model, and the calls the model makes: OpenAI's function tools.

``ToolUse`` is what a program's request offers (its ``tools``, ``tool_choice`` and
``parallel_tool_calls``), kept whole on the run (``runs/inputs.RunInput``) and read by the
engines that can call tools (``engines/kinds.Capabilities.tools``): an ``openai`` fleet sends
it on as given. A model's call arrives as ``ToolCallDelta`` fragments (an index, then its id
and name once, then pieces of its JSON arguments), as OpenAI and vLLM stream them; a whole
call, as a conversation carries it back, is a ``ToolCall``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FunctionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FunctionSpec(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class ChosenFunction(_Strict):
    name: FunctionName


class NamedChoice(_Strict):
    """``tool_choice`` naming the one function the model must call."""

    type: Literal["function"]
    function: ChosenFunction


ToolChoice = Literal["none", "auto", "required"] | NamedChoice


class ToolUse(_Strict):
    tools: Annotated[tuple[ToolSpec, ...], Field(min_length=1, max_length=128)]
    choice: ToolChoice | None = None
    parallel: bool | None = None

    def wire(self) -> dict[str, Any]:
        """As OpenAI's request carries it (what is set)."""
        out: dict[str, Any] = {"tools": [t.model_dump(exclude_none=True) for t in self.tools]}
        if self.choice is not None:
            out["tool_choice"] = (
                self.choice if isinstance(self.choice, str) else self.choice.model_dump()
            )
        if self.parallel is not None:
            out["parallel_tool_calls"] = self.parallel
        return out

    def names(self) -> set[str]:
        return {t.function.name for t in self.tools}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A whole call the model made: its id, the function's name, its arguments (JSON text,
    as the model wrote them)."""

    id: str
    name: str
    arguments: str

    def wire(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the ``index``-th call of an answer: its id and name come once (the
    first fragment), its arguments in pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


def merged(fragments: list[ToolCallDelta]) -> tuple[ToolCallDelta, ...]:
    """Fragments in order, a fragment that only continues the one before it joined to it."""
    out: list[ToolCallDelta] = []
    for f in fragments:
        last = out[-1] if out else None
        if last is not None and last.index == f.index and f.id is None and f.name is None:
            out[-1] = ToolCallDelta(last.index, last.id, last.name, last.arguments + f.arguments)
        else:
            out.append(f)
    return tuple(out)


def assembled(fragments: list[ToolCallDelta]) -> list[ToolCall]:
    """The whole calls the fragments make, by index."""
    calls: dict[int, list[str]] = {}
    for f in fragments:
        call = calls.setdefault(f.index, ["", "", ""])
        call[0] = f.id or call[0]
        call[1] = f.name or call[1]
        call[2] += f.arguments
    return [ToolCall(*calls[i]) for i in sorted(calls)]


class JsonSchema(_Strict):
    """``response_format.json_schema``: the schema the answer must follow."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's ``response_format``: text, any JSON object, or JSON following a schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is given with, and only with, type json_schema")
        return self

    @property
    def structured(self) -> bool:
        return self.type != "text"

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


Effort = Literal["minimal", "low", "medium", "high"]


class OutputSpec(_Strict):
    """What a program asks of its answer beyond sampling: the tools it offers, its format,
    how hard a reasoning model thinks. Kept whole on the run; an engine that cannot do one
    is refused by its capabilities (``engines/kinds.py``); an ``openai`` fleet sends it on."""

    tools: ToolUse | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: Effort | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.tools is None else self.tools.wire()
        if self.response_format is not None:
            out["response_format"] = self.response_format.wire()
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        return out
