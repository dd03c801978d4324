"""Which fields of a chat-completions request parley honours; every other is refused with a
400 naming it, never dropped.

``refusal(body)`` holds for every engine: a field OpenAI's API does not have, a field parley
does not honour yet (tools, structured output, logprobs, audio …, each named in
``NOT_YET``), and combinations OpenAI refuses too (``stream_options`` without ``stream``).
Sampling parameters are honoured per engine kind (``engines/kinds.Capabilities.sampling``):
``runs/rules.Rules.check_sampling`` refuses one that the model's engine cannot honour.
"""

from __future__ import annotations

from collections.abc import Callable

from parley.openai.protocol import ChatCompletionRequest

Check = Callable[[ChatCompletionRequest], bool]


def _set(name: str) -> Check:
    return lambda body: getattr(body, name) is not None


# field -> (whether the request asks for what parley cannot do yet, why)
NOT_YET: dict[str, tuple[Check, str]] = {
    "tools": (lambda b: bool(b.tools), "tools are not supported yet"),
    "functions": (lambda b: bool(b.functions), "functions are not supported yet"),
    "function_call": (_set("function_call"), "function_call is not supported yet"),
    "logprobs": (lambda b: bool(b.logprobs), "logprobs are not supported yet"),
    "top_logprobs": (_set("top_logprobs"), "top_logprobs are not supported yet"),
    "response_format": (
        lambda b: b.response_format is not None and b.response_format.get("type") != "text",
        "only the text response format is supported yet",
    ),
    "reasoning_effort": (_set("reasoning_effort"), "reasoning_effort is not supported yet"),
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
    return _combination(body)


def _combination(body: ChatCompletionRequest) -> tuple[str, str] | None:
    if body.n is not None and body.n != 1:
        return "n", "only n = 1 is supported"
    if body.stream_options is not None and not body.stream:
        return "stream_options", "stream_options is only allowed when stream is true"
    if (body.tool_choice is not None or body.parallel_tool_calls is not None) and not body.tools:
        param = "tool_choice" if body.tool_choice is not None else "parallel_tool_calls"
        return param, f"{param} is only allowed when tools are given"
    if len(body.stop_strings) > 4:
        return "stop", "at most 4 stop sequences"
    for i, m in enumerate(body.messages):
        if m.role == "tool":
            return f"messages.{i}.role", "tool messages need tools, not supported yet"
    return None
