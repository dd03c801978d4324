"""`parley engine serve` as a process: the built-in engine (a tiny model) behind OpenAI's
chat-completions API, as a fleet replica and other tools see it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.engines.tiny import save_tiny_chat_model
from tests.processes import Parley, free_port
from tests.waiting import eventually_sync

pytestmark = pytest.mark.slow

MODEL = "tiny-chat"
SYSTEM = "You are a careful assistant. " * 20  # a prefix long enough to fill cache blocks


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("engine-serve")
    model = save_tiny_chat_model(tmp / "tiny-chat")
    port = free_port()
    env = {"PARLEY_BUILTIN_ENGINE__KV_CACHE_TOKENS": "2048", "PARLEY_BUILTIN_ENGINE__DEVICE": "cpu"}
    proc = Parley(
        ["engine", "serve", "--model", str(model), "--port", str(port)], env, tmp / "serve.log"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_log("engine serving", timeout=120)
        eventually_sync(lambda: _up(base), "the engine's /health")
        yield base
    finally:
        proc.stop()


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _health(base: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{base}/health", timeout=5).json()
    return body


def _ask(content: str, **kw: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}],
        "max_tokens": 8,
        "temperature": 0,
        **kw,
    }


def _chunks(lines: list[str]) -> list[dict[str, Any]]:
    data = [line[6:] for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_models_lists_the_one_model(server: str) -> None:
    body = httpx.get(f"{server}/v1/models").json()
    assert [m["id"] for m in body["data"]] == [MODEL]


def test_a_streamed_answer_equals_the_whole_one_and_reports_usage(server: str) -> None:
    whole = httpx.post(f"{server}/v1/chat/completions", json=_ask("hi"), timeout=60).json()
    text = whole["choices"][0]["message"]["content"]
    assert whole["usage"]["completion_tokens"] == 8
    assert whole["choices"][0]["finish_reason"] == "length"
    with httpx.stream(
        "POST",
        f"{server}/v1/chat/completions",
        json=_ask("hi", stream=True, stream_options={"include_usage": True}),
        timeout=60,
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = _chunks(list(r.iter_lines()))
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]
    assert "".join(pieces) == text  # greedy: the same answer
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == []
    streamed, said = dict(chunks[-1]["usage"]), dict(whole["usage"])
    # the second asking finds the first's prompt in the prefix cache
    assert streamed.pop("prompt_tokens_details")["cached_tokens"] > 0
    said.pop("prompt_tokens_details")
    assert streamed == said


def test_the_second_turn_finds_its_prefix_in_the_cache(server: str) -> None:
    before = _health(server)["prefix_cache"]
    httpx.post(f"{server}/v1/chat/completions", json=_ask("first"), timeout=60)
    second = httpx.post(f"{server}/v1/chat/completions", json=_ask("second"), timeout=60)
    after = _health(server)["prefix_cache"]
    # as vLLM reports it: usage.prompt_tokens_details.cached_tokens
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16 * 10
    assert after["queries"] > before["queries"]
    assert after["hits"] - before["hits"] >= 16 * 10  # the system prompt's full blocks


def test_a_client_that_leaves_frees_its_slot(server: str) -> None:
    ask = _ask("go on", stream=True, max_tokens=1500)  # the tiny model never stops by itself
    with httpx.stream("POST", f"{server}/v1/chat/completions", json=ask, timeout=60) as r:
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        assert _health(server)["in_flight"] == 1
    eventually_sync(lambda: _health(server)["in_flight"] == 0, "the slot to be freed")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model_not_found"),
        ({"model": MODEL, "messages": []}, 400, None),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "frobnicate": 1},
            400,
            "unsupported_parameter",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "audio": {}},
            400,
            "unsupported_parameter",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x " * 3000}]},
            400,
            "context_length_exceeded",
        ),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    server: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"]
    assert error["code"] == code
    assert _health(server)["in_flight"] == 0


def test_a_response_format_is_decoded_under_its_schema(server: str) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
        "additionalProperties": False,
    }
    ask = _ask("numbers please", max_tokens=300)
    ask["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    r = httpx.post(f"{server}/v1/chat/completions", json=ask, timeout=60)
    assert r.status_code == 200, r.text
    answer = json.loads(r.json()["choices"][0]["message"]["content"])
    assert set(answer) == {"n", "ok"} and isinstance(answer["ok"], bool)


def test_tool_calls_stream_in_openai_s_shape_and_results_are_read_back(server: str) -> None:
    """Under ``tool_choice: required`` the tiny random model calls a tool in the format the
    grammar allows; the server streams it as OpenAI's fragments (the official client
    assembles them), answers it whole the same, and takes the call and its result back."""
    import openai

    add: Any = {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="-", max_retries=0)
    ask: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "add two numbers"}],
        "tools": [add],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 200,
        "temperature": 0,
    }
    with client.chat.completions.stream(**ask) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_completion().choices[0]
    whole = client.chat.completions.create(**ask).choices[0]
    assert streamed.finish_reason == whole.finish_reason == "tool_calls"
    (call,) = streamed.message.tool_calls or []
    (same,) = whole.message.tool_calls or []
    assert call.type == "function" and call.function.name == "add"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"a", "b"} and all(isinstance(v, int) for v in arguments.values())
    assert same.function.arguments == call.function.arguments
    back = [
        *ask["messages"],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": same.function.model_dump()}
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=back, tools=[add], max_tokens=8, temperature=0
    )
    assert answer.usage is not None and answer.usage.prompt_tokens > 30
    assert _health(server)["in_flight"] == 0
