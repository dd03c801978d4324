"""Every field of a chat-completions request is honoured (an effect a client can see) or
refused with a 400 naming it, never dropped: this walks ``ChatCompletionRequest``'s fields,
and a field added to it without a place here fails the walk.

On the built-in engine (the tiny random chat model, greedy unless a field says otherwise),
on one stack (what a field does does not depend on the database or the bus).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.openai.params import NOT_YET
from parley.openai.protocol import ChatCompletionRequest
from tests.builders import migrated_sqlite
from tests.engines.tiny import save_tiny_chat_model
from tests.helpers import bearer, new_api_key

MODEL = "tiny-chat"
TOKENS = 48
BASE: dict[str, Any] = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hello there"}],
    "max_tokens": TOKENS,
    "temperature": 0,
}

Post = Callable[..., Awaitable[httpx.Response]]


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat")


@pytest.fixture(params=["sqlite-memory"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    return migrated_sqlite(tmp_path), "memory"


@pytest.fixture
def run_overrides(tiny_chat_model: Path) -> dict[str, Any]:
    return {
        "engine": "builtin",
        "default_tier": "pro",
        "builtin_engine": {"model": tiny_chat_model, "kv_cache_tokens": 4096, "max_running": 4},
    }


@pytest.fixture
async def post(run_client: httpx.AsyncClient) -> Post:
    auth = bearer(await new_api_key(run_client, "fields@example.com"))

    async def post(**fields: Any) -> httpx.Response:
        body = {**BASE, **fields}
        return await run_client.post("/v1/chat/completions", json=body, headers=auth)

    return post


def text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def completion_tokens(r: httpx.Response) -> int:
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["completion_tokens"])


# -- honoured: each with the effect a client sees ---------------------------------------------


async def _model(post: Post) -> None:
    assert (await post(model=MODEL)).json()["model"] == MODEL
    assert (await post(model="nope")).status_code == 404


async def _messages(post: Post) -> None:
    other = [{"role": "user", "content": "something else entirely, and longer"}]
    assert text(await post(messages=other)) != text(await post())


async def _max_tokens(post: Post) -> None:
    assert completion_tokens(await post(max_tokens=3)) == 3


async def _max_completion_tokens(post: Post) -> None:
    assert completion_tokens(await post(max_completion_tokens=4)) == 4


async def _temperature(post: Post) -> None:
    assert text(await post(temperature=1.8, seed=1)) != text(await post())


async def _top_p(post: Post) -> None:
    # a nucleus of one token: the likeliest, as greedy takes it
    assert text(await post(temperature=1.8, seed=1, top_p=0.001)) == text(await post())


async def _seed(post: Post) -> None:
    one = text(await post(temperature=1.5, seed=7))
    assert text(await post(temperature=1.5, seed=7)) == one
    assert text(await post(temperature=1.5, seed=8)) != one


async def _stop(post: Post) -> None:
    whole = text(await post())
    cut = text(await post(stop=[whole[10:13]]))
    assert len(cut) < len(whole) and whole.startswith(cut)


async def _frequency_penalty(post: Post) -> None:
    assert text(await post(frequency_penalty=2)) != text(await post())


async def _presence_penalty(post: Post) -> None:
    assert text(await post(presence_penalty=2)) != text(await post())


async def _logit_bias(post: Post) -> None:
    forced = text(await post(logit_bias={"65": 100}, max_tokens=8))
    assert len(set(forced)) == 1, forced  # one token over and over
    assert (await post(logit_bias={"99999": 5})).status_code != 200  # past the vocabulary


async def _top_k(post: Post) -> None:
    assert text(await post(temperature=1.8, seed=1, top_k=1)) == text(await post())


async def _min_p(post: Post) -> None:
    assert text(await post(temperature=1.8, seed=1, min_p=1.0)) == text(await post())


async def _logprobs(post: Post) -> None:
    """Each token's log probability; greedy, the token said is the likeliest one."""
    r = await post(logprobs=True, top_logprobs=3, max_tokens=5)
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 5
    for token in content:
        top = token["top_logprobs"]
        assert len(top) == 3 and token["logprob"] <= 0
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert (top[0]["token"], top[0]["logprob"]) == (token["token"], token["logprob"])
        assert bytes(token["bytes"]).decode("utf-8", "replace") == token["token"]
    assert (await post()).json()["choices"][0].get("logprobs") is None
    streamed = await post(logprobs=True, max_tokens=5, stream=True)
    data = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    pieces = [
        p for d in data for p in ((d["choices"][0].get("logprobs") or {}).get("content") or [])
    ]
    assert [p["token"] for p in pieces] == [t["token"] for t in content]
    assert all(p["top_logprobs"] == [] for p in pieces)


async def _top_logprobs(post: Post) -> None:
    r = await post(logprobs=True, top_logprobs=0, max_tokens=2)
    assert [t["top_logprobs"] for t in r.json()["choices"][0]["logprobs"]["content"]] == [[], []]
    r = await post(logprobs=True, top_logprobs=5, max_tokens=2)
    assert [len(t["top_logprobs"]) for t in r.json()["choices"][0]["logprobs"]["content"]] == [5, 5]


async def _stream(post: Post) -> None:
    r = await post(stream=True)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.rstrip().endswith("data: [DONE]")


async def _stream_options(post: Post) -> None:
    r = await post(stream=True, stream_options={"include_usage": True})
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    chunks = [json.loads(d) for d in data if d != "[DONE]"]
    assert chunks[-1]["usage"]["completion_tokens"] == TOKENS


async def _n(post: Post) -> None:
    assert len((await post(n=1)).json()["choices"]) == 1


async def _store(post: Post) -> None:
    r = await post(store=True)
    assert r.status_code == 200  # kept as a chat of the caller's (tests/api/test_openai.py)


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


async def _response_format(post: Post) -> None:
    """Under a grammar, even the tiny random model answers JSON for the schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    person = json.loads(text(await post(response_format=fmt, max_tokens=200)))
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    assert len(person["name"]) <= 6
    anything = json.loads(text(await post(response_format={"type": "json_object"}, max_tokens=200)))
    assert isinstance(anything, dict)
    assert text(await post(response_format={"type": "text"})) == text(await post())


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD: dict[str, Any] = {
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
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, ADD)}


def calls(r: httpx.Response) -> list[dict[str, Any]]:
    """The answer's calls, each checked: an id, a tool's name, arguments valid for its
    schema (the grammar's doing: the tiny random model knows nothing of tools)."""
    import jsonschema

    assert r.status_code == 200, r.text
    made = r.json()["choices"][0]["message"].get("tool_calls") or []
    for call in made:
        assert call["id"].startswith("call_") and call["type"] == "function"
        schema = SCHEMAS[call["function"]["name"]]
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
    return list(made)


async def _tools(post: Post) -> None:
    r = await post(tools=[WEATHER, ADD], tool_choice="required", max_tokens=300)
    assert calls(r) and r.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert r.json()["choices"][0]["message"]["content"] is None
    # streamed: OpenAI's fragments (id, type and name first), the same calls assembled
    streamed = await post(tools=[WEATHER, ADD], tool_choice="required", max_tokens=300, stream=True)
    data = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: {")]
    deltas = [json.loads(d)["choices"][0]["delta"] for d in data if json.loads(d)["choices"]]
    pieces = [p for d in deltas for p in d.get("tool_calls", [])]
    assert pieces[0]["id"] and pieces[0]["type"] == "function" and pieces[0]["function"]["name"]
    whole = calls(r)
    assert "".join(p["function"]["arguments"] for p in pieces) == "".join(
        c["function"]["arguments"] for c in whole
    )
    # auto: an answer in text, or calls; either way one the client can read
    r = await post(tools=[WEATHER, ADD], max_tokens=300)
    assert r.status_code == 200, r.text
    auto = r.json()["choices"][0]
    if auto["message"].get("tool_calls"):
        assert auto["finish_reason"] == "tool_calls"
    else:
        assert not auto["message"]["content"].startswith("<tool_call>")


async def _tool_choice(post: Post) -> None:
    named = {"type": "function", "function": {"name": "add"}}
    made = calls(await post(tools=[WEATHER, ADD], tool_choice=named, max_tokens=300))
    assert made and {c["function"]["name"] for c in made} == {"add"}
    # none: the answer the model gives with no tools at all
    assert text(await post(tools=[WEATHER, ADD], tool_choice="none")) == text(await post())


async def _parallel_tool_calls(post: Post) -> None:
    # the end token (258) held back: the model goes on calling while the grammar lets it
    asked = {
        "tools": [WEATHER, ADD],
        "tool_choice": "required",
        "max_tokens": 300,
        "logit_bias": {"258": -100},
    }
    assert len((await post(**asked)).json()["choices"][0]["message"]["tool_calls"]) > 1
    one = calls(await post(**asked, parallel_tool_calls=False))
    assert len(one) == 1


async def _identifiers(post: Post) -> None:
    # OpenAI's end-user identifiers, for its abuse monitoring: accepted, parley's own
    # accounting is by API key
    assert (await post(user="u-1", safety_identifier="s-1")).status_code == 200


HONOURED: dict[str, Callable[[Post], Awaitable[None]]] = {
    "model": _model,
    "messages": _messages,
    "max_tokens": _max_tokens,
    "max_completion_tokens": _max_completion_tokens,
    "temperature": _temperature,
    "top_p": _top_p,
    "seed": _seed,
    "stop": _stop,
    "frequency_penalty": _frequency_penalty,
    "presence_penalty": _presence_penalty,
    "logit_bias": _logit_bias,
    "top_k": _top_k,
    "min_p": _min_p,
    "stream": _stream,
    "stream_options": _stream_options,
    "n": _n,
    "store": _store,
    "user": _identifiers,
    "response_format": _response_format,
    "safety_identifier": _identifiers,
    "logprobs": _logprobs,
    "top_logprobs": _top_logprobs,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _parallel_tool_calls,
}

TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}

# refused: a value that asks for what parley does not do (yet), or the built-in engine
REFUSED: dict[str, Any] = {
    "functions": [{"name": "f", "parameters": {}}],
    "function_call": "auto",
    "reasoning_effort": "low",
    "verbosity": "low",
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "mp3"},
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {},
    "service_tier": "flex",
    "metadata": {"k": "v"},
    "prompt_cache_key": "k",
    "chat_template_kwargs": {"enable_thinking": False},
}


def test_every_field_of_the_request_has_its_place() -> None:
    fields = set(ChatCompletionRequest.model_fields)
    assert set(HONOURED) | set(REFUSED) == fields
    assert not set(HONOURED) & set(REFUSED)
    assert set(NOT_YET) <= set(REFUSED)


@pytest.mark.parametrize("field", sorted(HONOURED))
async def test_a_field_parley_honours_has_its_effect(post: Post, field: str) -> None:
    await HONOURED[field](post)


@pytest.mark.parametrize("field", sorted(REFUSED))
async def test_a_field_parley_cannot_honour_is_refused_by_name(post: Post, field: str) -> None:
    r = await post(**{field: REFUSED[field]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (field, "unsupported_parameter")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"frobnicate": 1}, "frobnicate"),  # no such field in OpenAI's API
        ({"repetition_penalty": 1.1}, "repetition_penalty"),  # a vendor's, not honoured
        ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
        ({"n": 2}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id"),
        ({"messages": [{"role": "user", "content": "x", "name": "ada"}]}, "messages.0.name"),
        ({"messages": [{"role": "user", "content": "x", "weight": 1}]}, "messages.0.weight"),
        ({"tools": [TOOL, TOOL]}, "tools"),  # one name twice
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "tool_choice",
        ),
    ],
)
async def test_what_openai_refuses_too_is_refused_by_name(
    post: Post, fields: dict[str, Any], param: str
) -> None:
    r = await post(**fields)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
