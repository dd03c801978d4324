"""The OpenAI Agents SDK (``openai-agents``) runs an agent through parley: one agent, two
function tools, a task that needs both. Through ``/v1/responses`` (the SDK's default model)
and ``/v1/chat/completions``, streamed and whole, in front of an upstream that calls both
tools at once in vLLM's shape and then answers from their results (``scripted.agent``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.fleet.conftest import FLEET_MODEL, Fleet
from tests.fleet.servers import Misbehaving
from tests.fleet.test_tools import program

ASKED = "Weather and time in Paris?"


def _agent(model: Any, called: list[str]) -> Any:
    from agents import Agent, function_tool

    @function_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """The weather in a city."""
        called.append(f"weather:{city}:{unit}")
        return "sunny, 21 degrees"

    @function_tool
    def get_time(timezone: str) -> str:
        """The time in a timezone."""
        called.append(f"time:{timezone}")
        return "14:05"

    return Agent(
        name="concierge",
        instructions="Answer with the weather and the time.",
        model=model,
        tools=[get_weather, get_time],
    )


def _model(kind: str, client: openai.AsyncOpenAI) -> Any:
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel

    if kind == "responses":
        return OpenAIResponsesModel(model=FLEET_MODEL, openai_client=client)
    return OpenAIChatCompletionsModel(model=FLEET_MODEL, openai_client=client)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["responses", "chat"])
async def test_an_agent_with_two_tools_completes_its_task_through_parley(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving], kind: str, streamed: bool
) -> None:
    from agents import Runner, set_tracing_disabled

    set_tracing_disabled(True)  # no traces to OpenAI's servers
    server = misbehaving("agent")
    called: list[str] = []
    async with fleet([server.url]) as front, program(front) as client:
        agent = _agent(_model(kind, client), called)
        if streamed:
            run = Runner.run_streamed(agent, ASKED)
            async for _ in run.stream_events():
                pass
            output = run.final_output
        else:
            output = (await Runner.run(agent, ASKED)).final_output
    assert sorted(called) == ["time:Europe/Paris", "weather:Paris:celsius"]
    assert output == "In Paris: sunny, 21 degrees and 14:05."
    assert server.requests() == 2  # the calls, then the answer from their results
    sent = server.last_body()
    results = [m for m in sent["messages"] if m["role"] == "tool"]
    assert {m["tool_call_id"] for m in results} == {"chatcmpl-tool-a1", "chatcmpl-tool-b2"}
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "get_time"]
