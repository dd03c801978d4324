"""``POST /v1/responses`` driven by the official ``openai`` client, on the built-in engine
(the tiny random chat model, greedy): text and item input, instructions, function tools
(calls under the grammar), a JSON schema format, streamed semantic events that add up to
the whole response, and what parley refuses named."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import jsonschema
import openai
import pytest

from tests.builders import migrated_sqlite
from tests.engines.tiny import save_tiny_chat_model
from tests.helpers import new_api_key

MODEL = "tiny-chat"
ADD: dict[str, Any] = {
    "type": "function",
    "name": "add",
    "description": "Adds two integers",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}


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
async def client(run_client: httpx.AsyncClient) -> AsyncIterator[openai.AsyncOpenAI]:
    key = await new_api_key(run_client, "responses@example.com")
    base = f"{str(run_client.base_url).rstrip('/')}/v1"
    async with openai.AsyncOpenAI(
        base_url=base, api_key=key, http_client=cast(Any, run_client), max_retries=0
    ) as c:
        yield c


async def test_a_text_input_is_answered_as_a_chat_completion_of_it_is(
    client: openai.AsyncOpenAI,
) -> None:
    r = await client.responses.create(
        model=MODEL, input="hello there", max_output_tokens=12, temperature=0
    )
    chat = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        max_completion_tokens=12,
        temperature=0,
    )
    assert r.id.startswith("resp_") and r.object == "response" and r.model == MODEL
    assert r.output_text == chat.choices[0].message.content
    assert r.status == "incomplete"  # the tiny model never stops by itself
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage is not None and r.usage.output_tokens == 12
    assert r.usage.input_tokens == chat.usage.prompt_tokens  # type: ignore[union-attr]


async def test_instructions_and_items_make_the_prompt(client: openai.AsyncOpenAI) -> None:
    plain = await client.responses.create(
        model=MODEL, input="hi", max_output_tokens=8, temperature=0
    )
    told = await client.responses.create(
        model=MODEL,
        instructions="Answer in French, always and only.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        max_output_tokens=8,
        temperature=0,
    )
    assert told.usage is not None and plain.usage is not None
    assert told.usage.input_tokens > plain.usage.input_tokens
    assert told.output_text != plain.output_text
    assert told.instructions == "Answer in French, always and only."


async def test_the_streamed_events_add_up_to_the_whole_response(
    client: openai.AsyncOpenAI,
) -> None:
    ask: dict[str, Any] = {
        "model": MODEL,
        "input": "tell me",
        "max_output_tokens": 10,
        "temperature": 0,
    }
    whole = await client.responses.create(**ask)
    stream = await client.responses.create(**ask, stream=True)
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(getattr(e, "delta", "") for e in events if e.type.endswith("text.delta"))
    last = events[-1]
    assert deltas == whole.output_text == last.response.output_text


async def test_function_tools_are_called_and_their_results_taken_back(
    client: openai.AsyncOpenAI,
) -> None:
    ask: dict[str, Any] = {
        "model": MODEL,
        "input": "add 2 and 3",
        "tools": [ADD],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 200,
        "temperature": 0,
    }
    r = await client.responses.create(**ask)
    (call,) = [item for item in r.output if item.type == "function_call"]
    assert r.status == "completed" and call.name == "add" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), ADD["parameters"])
    # streamed: the call's item, its argument deltas, the same arguments at the end
    async with client.responses.stream(**ask) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_response()
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert pieces == call.arguments
    (streamed,) = [item for item in final.output if item.type == "function_call"]
    assert streamed.arguments == call.arguments
    # the call and its output go back as items; the next answer reads them
    back = [
        {"role": "user", "content": "add 2 and 3"},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": "add",
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "5"},
    ]
    answer = await client.responses.create(
        model=MODEL,
        input=cast(Any, back),
        tools=cast(Any, [ADD]),
        max_output_tokens=8,
        temperature=0,
    )
    assert answer.usage is not None and r.usage is not None
    assert answer.usage.input_tokens > r.usage.input_tokens


async def test_a_json_schema_format_is_followed(client: openai.AsyncOpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 8}, "ok": {"type": "boolean"}},
        "required": ["name", "ok"],
        "additionalProperties": False,
    }
    r = await client.responses.create(
        model=MODEL,
        input="who?",
        text={"format": {"type": "json_schema", "name": "who", "schema": schema, "strict": True}},
        max_output_tokens=200,
        temperature=0,
    )
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text is not None and r.text.format is not None
    assert r.text.format.type == "json_schema"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"store": True}, "store"),
        ({"previous_response_id": "resp_x"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"tools": [{**ADD, "colour": 1}]}, "tools.0.colour"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ({"truncation": "auto"}, "truncation"),
        ({"background": True}, "background"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0",
        ),
        ({"input": [{"role": "user", "content": "x", "weight": 2}]}, "input.0.weight"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    ],
)
async def test_what_parley_does_not_do_is_refused_by_name(
    client: openai.AsyncOpenAI, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model=MODEL, input="hi", extra_body=fields)
    assert refused.value.body is not None
    assert refused.value.body["param"] == param  # type: ignore[index]


async def test_an_unknown_model_is_model_not_found(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="nope", input="hi")


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_an_agent_calls_its_tools_on_the_built_in_engine(
    client: openai.AsyncOpenAI, api: str
) -> None:
    """The Agents SDK on the built-in engine: its first turn must call a tool (the grammar
    keeps the tiny random model to the tools' schemas); the agent runs the call and stops
    on its result, as ``tool_use_behavior="stop_on_first_tool"`` asks."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[tuple[str, Any]] = []

    @function_tool
    def add(a: int, b: int) -> str:
        """Adds two integers."""
        called.append(("add", (a, b)))
        return f"sum={a + b}"

    @function_tool
    def shout(text: str) -> str:
        """Says a text louder."""
        called.append(("shout", text))
        return text.upper()

    model: Any = (
        OpenAIResponsesModel(model=MODEL, openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    )
    agent = Agent(
        name="calculator",
        instructions="Use your tools.",
        model=model,
        tools=[add, shout],
        model_settings=ModelSettings(
            tool_choice="required", temperature=0, max_tokens=120, parallel_tool_calls=False
        ),
        tool_use_behavior="stop_on_first_tool",
    )
    result = await Runner.run(agent, "add 2 and 3", max_turns=2)
    assert len(called) == 1
    name, args = called[0]
    if name == "add":
        assert all(isinstance(v, int) for v in args)
        assert result.final_output == f"sum={sum(args)}"
    else:
        assert isinstance(args, str) and result.final_output == args.upper()
