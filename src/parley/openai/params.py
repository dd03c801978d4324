"""Which fields of a chat-completions request parley honours; every other is refused with a
400 naming it, never dropped.

``refusal(body)`` holds for every engine: a field OpenAI's API does not have, a field parley
does not honour yet (structured output, logprobs, audio …, each named in ``NOT_YET``), and
combinations OpenAI refuses too (``stream_options`` without ``stream``, a tool message that
names no call). Sampling parameters and tools are honoured per engine kind
(``engines/kinds.Capabilities``): ``runs/rules.Rules`` refuses what the model's engine
cannot do.
"""

from __future__ import annotations

from collections.abc import Callable

from parley.openai.protocol import ChatCompletionRequest

Check = Callable[[ChatCompletionRequest], bool]


def _set(name: str) -> Check:
    return lambda body: getattr(body, name) is not None


# field -> (whether the request asks for what parley cannot do yet, why)
NOT_YET: dict[str, tuple[Check, str]] = {
    "functions": (lambda b: bool(b.functions), "functions are not supported yet"),
    "function_call": (_set("function_call"), "function_call is not supported yet"),
    "verbosity": (_set("verbosity"), "verbosity is not supported"),
    "modalities": (
        lambda b: b.modalities is not None and b.modalities != ["text"],
        "only the text modality is supported",
    ),
    "audio": (_set("audio"), "audio output is not supported"),
    "prediction": (_set("prediction"), "predicted outputs are not supported"),
    "web_search_options": (_set("web_search_options"), "web search is not supported"),
    "service_tier": (
        lambda b: b.service_tier not in (None, "auto", "default"),
        "service tiers are parley's own (your account's tier); only auto or default",
    ),
    "metadata": (_set("metadata"), "metadata is not supported (parley keeps no completions)"),
    "prompt_cache_key": (_set("prompt_cache_key"), "prompt_cache_key is not supported yet"),
    "chat_template_kwargs": (
        _set("chat_template_kwargs"),
        "chat_template_kwargs are not supported",
    ),
}


def refusal(body: ChatCompletionRequest) -> tuple[str, str] | None:
    """The first field of ``body`` parley refuses, and why; None when it honours them all."""
    for name in body.model_extra or {}:
        return name, f"Unrecognized request argument supplied: {name}"
    for name, (asks, why) in NOT_YET.items():
        if asks(body):
            return name, why
    return _combination(body) or _tools(body) or _messages(body)


def _combination(body: ChatCompletionRequest) -> tuple[str, str] | None:
    if body.n is not None and body.n != 1:
        return "n", "only n = 1 is supported"
    if body.stream_options is not None and not body.stream:
        return "stream_options", "stream_options is only allowed when stream is true"
    if body.top_logprobs is not None and not body.logprobs:
        return "top_logprobs", "top_logprobs is only allowed when logprobs is true"
    if len(body.stop_strings) > 4:
        return "stop", "at most 4 stop sequences"
    return None


def _tools(body: ChatCompletionRequest) -> tuple[str, str] | None:
    if (body.tool_choice is not None or body.parallel_tool_calls is not None) and not body.tools:
        param = "tool_choice" if body.tool_choice is not None else "parallel_tool_calls"
        return param, f"{param} is only allowed when tools are given"
    names = [t.function.name for t in body.tools or ()]
    if len(set(names)) != len(names):
        return "tools", "two tools have one name"
    choice = body.tool_choice
    if choice is not None and not isinstance(choice, str) and choice.function.name not in names:
        return "tool_choice", f"tool_choice names {choice.function.name!r}, which is not a tool"
    return None


def _messages(body: ChatCompletionRequest) -> tuple[str, str] | None:
    """Each message's fields: those OpenAI's API has, where it has them."""
    for i, m in enumerate(body.messages):
        for name in m.model_extra or {}:
            return f"messages.{i}.{name}", f"Unrecognized message field: {name}"
        if m.name is not None:
            return f"messages.{i}.name", "message names are not supported"
        if m.refusal is not None:
            return f"messages.{i}.refusal", "an earlier refusal cannot be sent back"
        if m.tool_calls and m.role != "assistant":
            return f"messages.{i}.tool_calls", "only an assistant message carries tool calls"
        if (m.role == "tool") != (m.tool_call_id is not None):
            return f"messages.{i}.tool_call_id", "a tool message, and only one, names its call"
    return None
