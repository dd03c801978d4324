"""Streams as real servers send them, replayed by ``tests.fleet.misbehaving``'s scripted
modes: tool calls in vLLM's shape (parallel calls, each id/type/name first, arguments split
over many chunks) and OpenAI's (text, then a call), reasoning before content (vLLM's and
llama.cpp's ``reasoning_content``), a model that reasons for a long while, and a model an
agent drives (calls, then an answer from their results)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

Body = dict[str, Any]  # the chat request's JSON body

# the long reasoner's thinking: three times the test's first-token timeout (3 s in CI;
# PARLEY_TEST_REASONING_SECONDS=180 runs the three minutes against a 60 s timeout)
REASONING_SECONDS = float(os.environ.get("PARLEY_TEST_REASONING_SECONDS", "3"))


def _raw(choices: list[dict[str, object]], **extra: object) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return f"data: {json.dumps({**body, 'choices': choices, **extra})}\n\n".encode()


def _delta(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _raw([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}])


def _end(finish: str, completion: int) -> list[bytes]:
    usage = {"prompt_tokens": 30, "completion_tokens": completion, "total_tokens": 30 + completion}
    return [_delta({}, finish), _raw([], usage=usage), b"data: [DONE]\n\n"]


def _pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def vllm_parallel_calls(body: Body) -> AsyncIterator[bytes]:
    """vLLM's hermes parser: role first, then per call a head (id, type, name, empty
    arguments) and its arguments a few characters a chunk."""
    yield _delta({"role": "assistant", "content": ""})
    calls = [
        ("chatcmpl-tool-a1", "get_weather", '{"city": "Paris", "unit": "celsius"}'),
        ("chatcmpl-tool-b2", "get_time", '{"timezone": "Europe/Paris"}'),
    ]
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        yield _delta({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for piece in _pieces(arguments):
            yield _delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    for line in _end("tool_calls", 24):
        yield line


async def openai_text_then_call(body: Body) -> AsyncIterator[bytes]:
    """OpenAI's: text first, then one call whose head carries its name and no arguments."""
    yield _delta({"role": "assistant", "content": None, "refusal": None})
    for piece in ("Let me ", "look that up."):
        yield _delta({"content": piece})
    head = {"index": 0, "id": "call_Xy12", "type": "function"}
    yield _delta({"tool_calls": [{**head, "function": {"name": "search", "arguments": ""}}]})
    for piece in _pieces('{"query":"parley streaming"}', 5):
        yield _delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    for line in _end("tool_calls", 14):
        yield line


async def reasoning_then_content(body: Body) -> AsyncIterator[bytes]:
    """vLLM's and llama.cpp's reasoning parsers: reasoning_content, then content."""
    yield _delta({"role": "assistant"})
    for piece in ("The user ", "greets me; ", "I greet back."):
        yield _delta({"reasoning_content": piece})
    for piece in ("Hello ", "to you."):
        yield _delta({"content": piece})
    for line in _end("stop", 5):
        yield line


async def long_reasoning(body: Body) -> AsyncIterator[bytes]:
    """Reasoning for ``REASONING_SECONDS``, a chunk every 0.1 s, before the first content."""
    yield _delta({"role": "assistant"})
    steps = int(REASONING_SECONDS / 0.1)
    for i in range(steps):
        yield _delta({"reasoning_content": f"step {i}. "})
        await asyncio.sleep(0.1)
    yield _delta({"content": "Decided."})
    for line in _end("stop", steps + 1):
        yield line


async def with_logprobs(body: Body) -> AsyncIterator[bytes]:
    """Content with each token's log probability (OpenAI's ``logprobs.content``), as many
    alternatives as asked."""
    yield _delta({"role": "assistant", "content": ""})
    top = int(body.get("top_logprobs") or 0)
    for i, token in enumerate(["Hel", "lo", "!"]):
        alternatives = [
            {"token": f"{token}{k}", "logprob": -1.0 - k - i, "bytes": [72 + k]} for k in range(top)
        ]
        item = {
            "token": token,
            "logprob": -0.5 - i,
            "bytes": list(token.encode()),
            "top_logprobs": alternatives,
        }
        choice = {"index": 0, "delta": {"content": token}, "logprobs": {"content": [item]}}
        yield _raw([{**choice, "finish_reason": None}])
    for line in _end("stop", 3):
        yield line


async def agent(body: Body) -> AsyncIterator[bytes]:
    """A model an agent drives: asked, it calls both tools at once (vLLM's shape); given
    their results, it answers with them."""
    results = [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]
    if not results:
        async for line in vllm_parallel_calls(body):
            yield line
        return
    yield _delta({"role": "assistant", "content": ""})
    for piece in _pieces(f"In Paris: {' and '.join(results)}.", 6):
        yield _delta({"content": piece})
    for line in _end("stop", 9):
        yield line


SCRIPTS: dict[str, Callable[[Body], AsyncIterator[bytes]]] = {
    "agent": agent,
    "logprobs": with_logprobs,
    "vllm-calls": vllm_parallel_calls,
    "openai-text-call": openai_text_then_call,
    "reasoning": reasoning_then_content,
    "long-reasoning": long_reasoning,
}
