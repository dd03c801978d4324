"""Tool calling and reasoning through /v1, against a scripted upstream replaying streams in
vLLM's and OpenAI's shapes (``tests.fleet.scripted``), driven by the official ``openai``
client, streamed and whole: what the upstream sent reaches the client in OpenAI's exact
chunk shape, and what the client sent (tools, calls, results) reaches the upstream."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.fleet.conftest import FLEET_MODEL, Fleet, Front
from tests.fleet.scripted import REASONING_SECONDS
from tests.fleet.servers import Misbehaving
from tests.helpers import new_api_key

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "Weather and time in Paris?"}]
SEARCH: Any = {"type": "function", "name": "search", "parameters": {"type": "object"}}


@contextlib.asynccontextmanager
async def program(front: Front) -> AsyncIterator[openai.AsyncOpenAI]:
    key = await new_api_key(front.client, "agent@example.com")
    base = f"{str(front.client.base_url).rstrip('/')}/v1"
    client = openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)
    try:
        yield client
    finally:
        await client.close()


async def streamed(client: openai.AsyncOpenAI, **kw: Any) -> list[ChatCompletionChunk]:
    stream = await client.chat.completions.create(model=FLEET_MODEL, stream=True, **kw)
    return [chunk async for chunk in stream]


def calls_of(chunks: list[ChatCompletionChunk]) -> dict[int, dict[str, str]]:
    """The calls the chunks make, assembled as a client does; each call's first fragment
    must carry its id, type and name."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if piece.index not in calls:
                assert piece.id and piece.type == "function" and piece.function, piece
                assert piece.function.name, piece
                calls[piece.index] = {"id": piece.id, "name": piece.function.name, "args": ""}
            assert piece.function is not None
            calls[piece.index]["args"] += piece.function.arguments or ""
    return calls


async def whole(client: openai.AsyncOpenAI, **kw: Any) -> ChatCompletion:
    done: ChatCompletion = await client.chat.completions.create(model=FLEET_MODEL, **kw)
    return done


def finish_of(chunks: list[ChatCompletionChunk]) -> str | None:
    ends = [c.choices[0].finish_reason for c in chunks if c.choices]
    return next((end for end in ends if end), None)


async def test_parallel_calls_stream_in_openai_s_shape_and_whole(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("vllm-calls")
    async with fleet([server.url]) as front, program(front) as client:
        chunks = await streamed(client, messages=ASK, tools=[WEATHER, TIME])
        calls = calls_of(chunks)
        assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
        assert json.loads(calls[0]["args"]) == {"city": "Paris", "unit": "celsius"}
        assert json.loads(calls[1]["args"]) == {"timezone": "Europe/Paris"}
        assert calls[0]["id"] == "chatcmpl-tool-a1"
        assert finish_of(chunks) == "tool_calls"
        done = await whole(client, messages=ASK, tools=[WEATHER, TIME])
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    got = [
        (c.id, c.function.name, json.loads(c.function.arguments))  # type: ignore[union-attr]
        for c in choice.message.tool_calls
    ]
    assert got == [
        ("chatcmpl-tool-a1", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ("chatcmpl-tool-b2", "get_time", {"timezone": "Europe/Paris"}),
    ]
    sent = server.last_body()
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "get_time"]


async def test_text_then_a_call_and_the_results_go_back_upstream(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("openai-text-call")
    search = {"type": "function", "function": {"name": "search", "parameters": {}}}
    async with fleet([server.url]) as front, program(front) as client:
        chunks = await streamed(
            client, messages=ASK, tools=[search], tool_choice="auto", parallel_tool_calls=False
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Let me look that up."
        assert calls_of(chunks) == {
            0: {"id": "call_Xy12", "name": "search", "args": '{"query":"parley streaming"}'}
        }
        assert finish_of(chunks) == "tool_calls"
        sent = server.last_body()
        assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("auto", False)
        # the next turn: the call, and its result, go back as the client sent them
        call = {
            "id": "call_Xy12",
            "type": "function",
            "function": {"name": "search", "arguments": '{"query":"parley streaming"}'},
        }
        turn = [
            *ASK,
            {"role": "assistant", "content": "Let me look that up.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_Xy12", "content": "3 results"},
        ]
        await whole(client, messages=turn, tools=[search])
    messages = server.last_body()["messages"]
    said = "Let me look that up."
    assert messages[1] == {"role": "assistant", "content": said, "tool_calls": [call]}
    assert messages[2] == {"role": "tool", "content": "3 results", "tool_call_id": "call_Xy12"}


async def test_reasoning_streams_apart_from_the_answer(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("reasoning")
    async with fleet([server.url]) as front, program(front) as client:
        chunks = await streamed(client, messages=ASK)
        reasoning = "".join(
            (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
            for c in chunks
            if c.choices
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        done = await whole(client, messages=ASK)
    assert reasoning == "The user greets me; I greet back."
    assert text == "Hello to you."  # the answer holds no reasoning
    message = done.choices[0].message
    assert message.content == "Hello to you."
    assert (message.model_extra or {})["reasoning_content"] == "The user greets me; I greet back."


async def test_a_model_that_reasons_past_the_first_token_timeout_is_answered_once(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    """Its first reasoning token starts the answer: the first-token timeout (a third of the
    reasoning's length) does not take it for a silent replica, and it is never retried."""
    server = misbehaving("long-reasoning")
    timeout = REASONING_SECONDS / 3
    patient = {"first_token_timeout_seconds": timeout, "idle_timeout_seconds": max(3, timeout)}
    async with fleet([server.url], **patient) as front, program(front) as c:
        chunks = await streamed(c, messages=ASK, timeout=REASONING_SECONDS + 60)
    reasoning = [
        (ch.choices[0].delta.model_extra or {}).get("reasoning_content")
        for ch in chunks
        if ch.choices
    ]
    assert sum(1 for r in reasoning if r) >= int(REASONING_SECONDS / 0.1) // 2  # streamed on
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "Decided."
    assert server.requests() == 1


@pytest.mark.parametrize(
    "messages",
    [
        ASK,
        [*ASK, {"role": "tool", "tool_call_id": "c1", "content": "x"}],
    ],
)
async def test_an_engine_that_cannot_call_tools_refuses_them_by_name(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving], messages: list[dict[str, Any]]
) -> None:
    server = misbehaving("vllm-calls")
    fake = [{"name": "parley-fake", "engine": "fake"}]
    async with fleet([server.url], extra_models=fake) as front, program(front) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="parley-fake", messages=cast(Any, messages), tools=cast(Any, [WEATHER])
            )
    assert refused.value.body is not None
    assert refused.value.body["param"] == "tools"  # type: ignore[index]
    assert server.requests() == 0


async def test_a_response_format_and_a_reasoning_effort_reach_the_upstream_as_sent(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("reasoning")
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "greeting",
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "strict": True,
        },
    }
    async with fleet([server.url]) as front, program(front) as client:
        await whole(client, messages=ASK, response_format=schema, reasoning_effort="low")
        sent = server.last_body()
        assert (sent["response_format"], sent["reasoning_effort"]) == (schema, "low")
        await whole(client, messages=ASK, response_format={"type": "json_object"})
        assert server.last_body()["response_format"] == {"type": "json_object"}
        with pytest.raises(openai.BadRequestError) as refused:  # a schema without its type
            await whole(
                client,
                messages=ASK,
                response_format={"type": "json_object", **{"json_schema": schema["json_schema"]}},
            )
    assert refused.value.status_code == 400


async def test_responses_stream_reasoning_text_and_calls_as_their_own_items(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    """Through /v1/responses: reasoning is an item of its own (reasoning_text deltas), then
    the message."""
    thinker = misbehaving("reasoning")
    async with fleet([thinker.url]) as front, program(front) as client:
        stream: Any = await client.responses.create(model=FLEET_MODEL, input="hi", stream=True)
        events: list[Any] = [e async for e in stream]
        whole = await client.responses.create(model=FLEET_MODEL, input="hi")
    reasoning = "".join(getattr(e, "delta", "") for e in events if "reasoning_text.delta" in e.type)
    assert reasoning == "The user greets me; I greet back."
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output_text == whole.output_text == "Hello to you."
    assert [item.type for item in whole.output] == ["reasoning", "message"]


async def test_responses_stream_text_then_a_call_as_two_items(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    caller = misbehaving("openai-text-call")
    async with fleet([caller.url]) as front, program(front) as client:
        stream = await client.responses.create(
            model=FLEET_MODEL, input="find it", tools=[SEARCH], stream=True
        )
        events: list[Any] = [e async for e in stream]
    final = events[-1].response
    assert [item.type for item in final.output] == ["message", "function_call"]
    call: Any = final.output[1]
    assert (call.call_id, call.name, call.arguments) == (
        "call_Xy12",
        "search",
        '{"query":"parley streaming"}',
    )
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(pieces) == call.arguments  # fragments may be joined on the way


async def test_log_probabilities_are_asked_of_the_upstream_and_relayed(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("logprobs")
    async with fleet([server.url]) as front, program(front) as client:
        done = await whole(client, messages=ASK, logprobs=True, top_logprobs=2)
        sent = server.last_body()
        chunks = await streamed(client, messages=ASK, logprobs=True)
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    choice = done.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert [(t.token, t.logprob, t.bytes) for t in content] == [
        ("Hel", -0.5, [72, 101, 108]),
        ("lo", -1.5, [108, 111]),
        ("!", -2.5, [33]),
    ]
    assert [len(t.top_logprobs) for t in content] == [2, 2, 2]
    pieces = [
        t
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content or []
    ]
    assert [t.token for t in pieces] == ["Hel", "lo", "!"]
