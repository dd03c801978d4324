"""A chat's server tools on the built-in engine (issue 43): the model calls under its
grammar (arguments valid for the tool's schema, even from the tiny random model), the call
runs, and the answer goes on from its result. ``tool_choice: required`` makes the first step
call; later steps choose. Both stacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import ROOMY_TIERS
from tests.engines.tiny import save_tiny_chat_model
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.runs.test_tool_rounds import _replay


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat")


@pytest.fixture
def run_overrides(tiny_chat_model: Path) -> dict[str, Any]:
    tiers = {name: {**tier, "max_tool_rounds": 2} for name, tier in ROOMY_TIERS.items()}
    return {
        "engine": "builtin",
        "tiers": tiers,
        "default_tier": "pro",
        "builtin_engine": {"model": tiny_chat_model, "kv_cache_tokens": 8192, "max_running": 4},
    }


async def test_the_built_in_engine_calls_a_server_tool_under_its_grammar(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    sent = await send_json(
        run_client,
        auth,
        chat,
        "what is my heron called?",
        tools=["search_chats"],
        tool_choice="required",
        temperature=0,
        max_tokens=600,
    )
    run = await wait_run(run_client, auth, sent["run_id"], timeout=120)
    assert run["status"] == "completed", run
    seen = await _replay(run_client, auth, sent["run_id"])
    results = [e.data for e in seen if e.event == "tool_result"]
    assert results and all(r["name"] == "search_chats" for r in results)
    stored = await stored_message(run_client, auth, chat, sent["message_id"])
    steps = stored["tool_steps"]
    assert [s["function"]["name"] for s in steps] == [r["name"] for r in results]
    for step in steps:  # valid for the tool's schema: the grammar's doing
        arguments = json.loads(step["function"]["arguments"])
        assert set(arguments) == {"query"} and isinstance(arguments["query"], str)
    assert len(results) <= 2  # max_tool_rounds
