"""OpenAI's Responses API, the stateless part: a ``POST /v1/responses`` body read into the
chat-completions request it asks for (``as_chat``), so that one path leads from either wire
request to a run's messages, sampling and output spec (``api/openai_wire.program_request``).

``input`` is a text or a list of items: messages (easy or typed, their text parts), earlier
``function_call`` items and their ``function_call_output``; ``reasoning`` items sent back
are left out (a model's reasoning is never fed back). ``instructions`` become the first
system message; function ``tools``, ``tool_choice``, ``parallel_tool_calls``,
``text.format`` (json_object, json_schema), ``reasoning.effort``, ``max_output_tokens``,
``temperature``, ``top_p`` map to their chat-completions fields. What needs a stored
response (``store: true``, ``previous_response_id``, ``conversation``, an item reference),
hosted tools, and every other field parley does not honour are refused by name
(``refusal``), never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.engines.tools import Effort, FunctionName
from parley.json_types import Flag, Integer, Number


class _Typed(BaseModel):
    """A part of the body; a field it does not name is kept and refused by name."""

    model_config = ConfigDict(extra="allow")


class FunctionTool(_Typed):
    type: str
    name: FunctionName | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(_Typed):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextOptions(_Typed):
    format: TextFormat | None = None
    verbosity: str | None = None


class Reasoning(_Typed):
    effort: Effort | None = None
    summary: str | None = None
    generate_summary: str | None = None


class StreamOptions(_Typed):
    include_obfuscation: bool | None = None


Item = dict[str, Any]


class ResponsesRequest(BaseModel):
    """Every field of OpenAI's ``responses.create``, typed; one it does not name is kept in
    ``model_extra`` and refused by name."""

    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(min_length=1, max_length=200)]
    input: str | Annotated[list[Item], Field(min_length=1, max_length=2048)]
    instructions: str | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=128)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: Flag | None = None
    text: TextOptions | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: Annotated[Integer, Field(gt=0)] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(gt=0, le=1)] | None = None
    stream: Flag = False
    stream_options: StreamOptions | None = None
    store: Flag | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    safety_identifier: Annotated[str, Field(max_length=256)] | None = None
    service_tier: str | None = None
    truncation: str | None = None
    include: list[str] | None = None
    # named so that a request setting one is refused by its name (``NOT_HONOURED``)
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: Flag | None = None
    prompt: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    max_tool_calls: Integer | None = None
    top_logprobs: Integer | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    moderation: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: list[Any] | None = None


Check = Callable[[ResponsesRequest], bool]


def _set(name: str) -> Check:
    return lambda body: getattr(body, name) is not None


STATELESS = "parley keeps no responses: send the whole conversation as input"

# field -> (whether the request asks for what parley does not do, why)
NOT_HONOURED: dict[str, tuple[Check, str]] = {
    "store": (lambda b: bool(b.store), f"store must be false or left out ({STATELESS})"),
    "previous_response_id": (_set("previous_response_id"), STATELESS),
    "conversation": (_set("conversation"), STATELESS),
    "background": (lambda b: bool(b.background), "background responses are not supported"),
    "prompt": (_set("prompt"), "stored prompts are not supported"),
    "include": (lambda b: bool(b.include), "no extra output can be included"),
    "metadata": (_set("metadata"), "metadata is not supported (parley keeps no responses)"),
    "max_tool_calls": (_set("max_tool_calls"), "max_tool_calls is not supported (no hosted tools)"),
    "top_logprobs": (_set("top_logprobs"), "top_logprobs are not supported yet"),
    "prompt_cache_key": (_set("prompt_cache_key"), "prompt_cache_key is not supported yet"),
    "prompt_cache_retention": (_set("prompt_cache_retention"), "prompt caching is parley's own"),
    "prompt_cache_options": (_set("prompt_cache_options"), "prompt caching is parley's own"),
    "context_management": (_set("context_management"), "context management is not supported"),
    "moderation": (_set("moderation"), "parley's own content policy applies"),
    "image": (_set("image"), "image generation is not supported"),
    "access_programs": (_set("access_programs"), "access programs are not supported"),
    "service_tier": (
        lambda b: b.service_tier not in (None, "auto", "default"),
        "service tiers are parley's own (your account's tier); only auto or default",
    ),
    "truncation": (
        lambda b: b.truncation not in (None, "disabled"),
        "only truncation disabled (a prompt too long for the model is refused)",
    ),
    "stream_options": (
        lambda b: b.stream_options is not None and not b.stream,
        "stream_options is only allowed when stream is true",
    ),
    "text.verbosity": (
        lambda b: b.text is not None and b.text.verbosity is not None,
        "verbosity is not supported",
    ),
    "reasoning.summary": (
        lambda b: (
            b.reasoning is not None
            and (b.reasoning.summary or b.reasoning.generate_summary) is not None
        ),
        "reasoning summaries are not made (the model's reasoning streams as it is)",
    ),
    "stream_options.include_obfuscation": (
        lambda b: b.stream_options is not None and bool(b.stream_options.include_obfuscation),
        "stream obfuscation is not supported",
    ),
}


def refusal(body: ResponsesRequest) -> tuple[str, str] | None:
    """The first field of ``body`` parley refuses, and why; None when it honours them all."""
    for name in body.model_extra or {}:
        return name, f"Unrecognized request argument supplied: {name}"
    for part, where in _parts(body):
        for name in part.model_extra or {}:
            return f"{where}.{name}", f"Unrecognized request argument supplied: {name}"
    for name, (asks, why) in NOT_HONOURED.items():
        if asks(body):
            return name, why
    for i, tool in enumerate(body.tools or ()):
        if tool.type != "function" or tool.name is None:
            return f"tools.{i}.type", f"only function tools are supported, not {tool.type!r}"
    return None


def _parts(body: ResponsesRequest) -> list[tuple[_Typed, str]]:
    parts: list[tuple[_Typed, str]] = [(t, f"tools.{i}") for i, t in enumerate(body.tools or ())]
    for part, where in (
        (body.text, "text"),
        (body.text.format if body.text else None, "text.format"),
        (body.reasoning, "reasoning"),
        (body.stream_options, "stream_options"),
    ):
        if part is not None:
            parts.append((part, where))
    return parts


class Refused(ValueError):
    """A part of the input parley cannot take; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def as_chat(body: ResponsesRequest) -> dict[str, Any]:
    """The chat-completions request ``body`` asks for (Refused for an input item or a
    ``tool_choice`` parley cannot take)."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        messages.append({"role": "user", "content": body.input})
    else:
        for i, item in enumerate(body.input):
            _take_item(messages, item, f"input.{i}")
    chat: dict[str, Any] = {"model": body.model, "messages": messages, "stream": body.stream}
    if body.tools:
        chat["tools"] = [_chat_tool(t) for t in body.tools]
    optional = {
        "tool_choice": _chat_tool_choice(body.tool_choice),
        "parallel_tool_calls": body.parallel_tool_calls,
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "response_format": _chat_format(body.text.format if body.text else None),
        "reasoning_effort": body.reasoning.effort if body.reasoning else None,
    }
    chat.update({k: v for k, v in optional.items() if v is not None})
    return chat


def _chat_tool(tool: FunctionTool) -> dict[str, Any]:
    function = tool.model_dump(include={"name", "description", "parameters", "strict"})
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and set(choice) <= {"type", "name"} and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    raise Refused("tool_choice", "tool_choice is none, auto, required or a named function")


def _chat_format(format_: TextFormat | None) -> dict[str, Any] | None:
    if format_ is None or format_.type != "json_schema":
        return None if format_ is None else {"type": format_.type}
    if format_.name is None:
        raise Refused("text.format.name", "a json_schema format has a name")
    schema = {"name": format_.name, "schema": format_.schema_ or {}, "strict": format_.strict}
    if format_.description is not None:
        schema["description"] = format_.description
    return {
        "type": "json_schema",
        "json_schema": {k: v for k, v in schema.items() if v is not None},
    }


# -- input items ------------------------------------------------------------------------------

MESSAGE_FIELDS = {"type", "role", "content", "id", "status", "phase"}
CALL_FIELDS = {"type", "call_id", "name", "arguments", "id", "status"}
OUTPUT_FIELDS = {"type", "call_id", "output", "id", "status"}
TEXT_PARTS = {"input_text", "output_text"}


def _take_item(messages: list[dict[str, Any]], item: Item, where: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        _known(item, MESSAGE_FIELDS, where)
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise Refused(f"{where}.role", f"a message's role is not {role!r}")
        messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
    elif kind == "function_call":
        _known(item, CALL_FIELDS, where)
        _take_call(messages, item, where)
    elif kind == "function_call_output":
        _known(item, OUTPUT_FIELDS, where)
        output = _text(item.get("output"), f"{where}.output")
        call_id = _string(item, "call_id", where)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    elif kind != "reasoning":  # a model's reasoning is never fed back
        why = f" ({STATELESS})" if kind == "item_reference" else ""
        raise Refused(f"{where}.type", f"input items of type {kind!r} are not supported{why}")


def _take_call(messages: list[dict[str, Any]], item: Item, where: str) -> None:
    """A call joins the assistant message before it (its text, its other calls), or makes
    one."""
    function = {
        "name": _string(item, "name", where),
        "arguments": _string(item, "arguments", where),
    }
    call = {"id": _string(item, "call_id", where), "type": "function", "function": function}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _known(item: Item, fields: set[str], where: str) -> None:
    for name in item:
        if name not in fields:
            raise Refused(f"{where}.{name}", f"Unrecognized input item field: {name}")


def _string(item: Item, name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise Refused(f"{where}.{name}", f"{name} is a string")
    return value


def _text(content: Any, where: str) -> str:
    """A content's text: a string, or its text parts (``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Refused(where, "content is a string or a list of parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise Refused(f"{where}.{j}", f"only text content is supported, not {kind!r}")
        text = part.get("text")
        if not isinstance(text, str):
            raise Refused(f"{where}.{j}.text", "a text part has its text")
        texts.append(text)
    return "".join(texts)
