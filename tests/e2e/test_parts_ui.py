"""Reasoning and tool calls in a real headless Chromium: a thinking model's reasoning
streams into a folded "Reasoning" block apart from its answer and is still there after a
reload; a conversation kept with its tool calls shows each call folded (its arguments
inside) and each tool's result folded, in the chat and on its shared page. The models are
scripted upstreams in vLLM's shapes (``tests.fleet.scripted``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import Server, ServerFactory, log_in, shot
from tests.fleet.servers import Misbehaving
from tests.fleet.test_stored_parts import KEPT
from tests.fleet.test_tools import WEATHER

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Misbehaving]]:
    tmp: Path = tmp_path_factory.mktemp("upstreams")
    made = {mode: Misbehaving(tmp, mode) for mode in ("reasoning", "vllm-calls")}
    yield made
    for server in made.values():
        server.stop()


@pytest.fixture
def parts_server(servers: ServerFactory, upstreams: dict[str, Misbehaving]) -> Server:
    models = [
        {"name": name, "engine": "openai", "replicas": [{"base_url": upstreams[mode].url}]}
        for name, mode in (("thinker", "reasoning"), ("caller", "vllm-calls"))
    ]
    return servers(PARLEY_ENGINES__MODELS=json.dumps(models))


def test_reasoning_streams_folded_apart_from_the_answer(
    context: BrowserContext, page: Page, parts_server: Server
) -> None:
    api = log_in(context, parts_server)
    chat = api.post("/api/chats", {"title": "Thinking"})
    page.goto(f"{parts_server.url}/c/{chat['id']}")
    page.locator("#prompt").fill("hello")
    page.keyboard.press("Enter")
    answer = page.locator("li.assistant").last
    expect(answer.locator(".content")).to_have_text("Hello to you.")
    folded = answer.locator("details.reasoning")
    expect(folded).to_be_visible()
    expect(folded.locator("summary")).to_have_text("Reasoning")
    expect(folded.locator(".reasoning-text")).to_be_hidden()  # folded until opened
    folded.locator("summary").click()
    expect(folded.locator(".reasoning-text")).to_have_text("The user greets me; I greet back.")
    shot(page, "reasoning-open")
    page.reload()
    stored = page.locator("li.assistant").last
    expect(stored.locator("details.reasoning .reasoning-text")).to_have_text(
        "The user greets me; I greet back.", use_inner_text=False
    )
    expect(stored.locator(".content")).to_have_text("Hello to you.")


def test_tool_calls_and_results_show_folded_in_the_chat_and_its_shared_page(
    context: BrowserContext, page: Page, parts_server: Server
) -> None:
    api = log_in(context, parts_server)
    key = api.post("/api/keys", {"name": "agent"})["key"]
    body = {"model": "caller", "messages": KEPT, "tools": [WEATHER], "store": True}
    r = httpx.post(
        f"{parts_server.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    chat = api.get("/api/chats")["data"][0]
    page.goto(f"{parts_server.url}/c/{chat['id']}")
    calls = page.locator("li.assistant details.tool-call")
    expect(calls).to_have_count(3)  # one earlier call, then the answer's two
    expect(calls.nth(1).locator("summary")).to_have_text("Called get_weather")
    expect(calls.nth(2).locator("summary")).to_have_text("Called get_time")
    calls.nth(1).locator("summary").click()
    expect(calls.nth(1).locator("pre")).to_contain_text('"city": "Paris"')
    result = page.locator("li.tool details.tool-result")
    expect(result.locator("summary")).to_have_text("Tool result (call_r1)")
    result.locator("summary").click()
    expect(result.locator(".content")).to_have_text("sunny, 24 degrees")
    shot(page, "tool-calls-open")
    share = api.post(f"/api/chats/{chat['id']}/shares", {})
    page.goto(f"{parts_server.url}{share['url']}")
    expect(page.locator("details.tool-call summary")).to_have_count(3)
    expect(page.locator("li.tool .tool-result")).to_have_text("sunny, 24 degrees")
