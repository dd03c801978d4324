"""The system prompt from settings opens every chat prompt, per model: a model's own
``system_prompt`` before ``context.system_prompt``; its tokens count in the run's budget."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.services import Services
from tests.context.test_long_chats import Recorder
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run

SYSTEM = "You are Parley's helpful assistant. Answer briefly and kindly."


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "context": {"system_prompt": "a default no model here uses"},
        "models": [{"name": FAKE_MODEL, "engine": "fake", "system_prompt": SYSTEM}],
    }


async def test_the_models_system_prompt_opens_every_prompt(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(run_services.engine, FakeEngine)
    recorder = Recorder(run_services.engine, monkeypatch)
    auth = await user_headers(run_client, "sys@example.com")
    chat_id = await new_chat(run_client, auth)
    for content in ("hello there", "and again"):
        sent = await send_json(run_client, auth, chat_id, content, max_tokens=8)
        run = await wait_run(run_client, auth, sent["run_id"])
        messages = recorder.requests[run["id"]].messages
        assert (messages[0].role, messages[0].content) == ("system", SYSTEM)
        assert messages[-1].content == content
        assert run["prompt"]["system_tokens"] == len(SYSTEM.split()) + 5
