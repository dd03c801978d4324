"""The model picker in a real headless Chromium: shown only when there is a choice; the
choice is sent with each message, kept per chat, and carried into new chats."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Request, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot

pytestmark = pytest.mark.slow

# The fake engine (the default, configured first) and an upstream that nothing answers: a
# run on it fails (engine_unavailable), which is all the picker needs.
TWO_MODELS = json.dumps(
    [
        {"name": "parley-fake", "engine": "fake"},
        {"name": "other", "engine": "openai", "replicas": [{"base_url": "http://127.0.0.1:9/v1"}]},
    ]
)
FAST = fake_engine(ttft_ms=0, itl_ms=5, tokens=8)
ENDED = re.compile(r"^(completed|failed)$")


@pytest.fixture
def two_models(servers: ServerFactory) -> Server:
    return servers(PARLEY_MODELS=TWO_MODELS, **FAST)


def picker(page: Page) -> Locator:
    return page.get_by_role("combobox", name="Model")


def open_app(page: Page, url: str) -> None:
    page.goto(url + "/")
    expect(page.locator("#shell")).to_be_visible()


def send(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.get_by_role("textbox", name="Message").press("Enter")


def answer(page: Page) -> Locator:
    return page.locator("li.assistant").last


def chat_id_of(page: Page) -> str:
    match = re.search(r"/c/([^/]+)$", page.url)
    assert match, page.url
    return match.group(1)


def record_sends(page: Page) -> list[dict[str, Any]]:
    """The bodies of the page's message POSTs, as they are sent."""
    bodies: list[dict[str, Any]] = []

    def on_request(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/messages"):
            body = request.post_data_json
            assert isinstance(body, dict), body
            bodies.append(body)

    page.on("request", on_request)
    return bodies


def open_chat(page: Page, chat_id: str) -> None:
    page.locator(f'li.chat-item[data-chat-id="{chat_id}"] .chat-link').click()
    expect(page.locator("li.assistant")).not_to_have_count(0)


def test_the_picked_model_is_sent_kept_per_chat_and_carried_into_new_chats(
    page: Page, context: BrowserContext, two_models: Server
) -> None:
    api = log_in(context, two_models)
    sends = record_sends(page)
    open_app(page, two_models.url)
    expect(picker(page)).to_be_visible()
    expect(picker(page).locator("option")).to_have_text(["parley-fake", "other"])
    expect(picker(page)).to_have_value("parley-fake")  # the default

    picker(page).select_option("other")
    send(page, "hello, other model")
    expect(answer(page)).to_have_attribute("data-status", ENDED)
    first = chat_id_of(page)
    assert sends == [{"content": "hello, other model", "model": "other"}]
    assert api.messages(first)[-1]["model"] == "other"

    page.get_by_role("button", name="New chat").click()
    expect(page.locator("li.assistant")).to_have_count(0)
    expect(picker(page)).to_have_value("other")  # the last model picked

    picker(page).select_option("parley-fake")
    send(page, "and now the default")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    second = chat_id_of(page)
    shot(page, "12-model-picker")
    assert sends[-1] == {"content": "and now the default", "model": "parley-fake"}
    assert api.messages(second)[-1]["model"] == "parley-fake"

    open_chat(page, first)
    expect(picker(page)).to_have_value("other")  # its answer's model, not the last picked
    open_chat(page, second)
    expect(picker(page)).to_have_value("parley-fake")
    page.goto(f"{two_models.url}/c/{first}")  # a reload lands on it too
    expect(page.locator("li.assistant")).to_have_count(1)
    expect(picker(page)).to_have_value("other")
    page.get_by_role("button", name="New chat").click()
    expect(picker(page)).to_have_value("parley-fake")  # picked last (in the second chat)

    # the choice of an opened chat is what the next message there goes to
    open_chat(page, first)
    send(page, "still you?")
    expect(page.locator("li.assistant")).to_have_count(2)
    expect(answer(page)).to_have_attribute("data-status", ENDED)
    assert sends[-1] == {"content": "still you?", "model": "other"}


def test_a_model_no_longer_listed_falls_back_to_the_default(
    page: Page, context: BrowserContext, servers: ServerFactory
) -> None:
    # the free tier may use only the default model: nothing to pick, so no picker
    tiers = {
        "free": {
            "priority": 0,
            "tokens_per_minute": 2000,
            "burst_tokens": 20000,
            "max_concurrent_runs": 1,
            "max_output_tokens": 512,
            "models": ["parley-fake"],
        }
    }
    limited = servers(PARLEY_MODELS=TWO_MODELS, PARLEY_TIERS=json.dumps(tiers), **FAST)
    api = log_in(context, limited)
    assert [m["id"] for m in api.get("/api/models")["data"]] == ["parley-fake"]
    sends = record_sends(page)
    page.goto(limited.url + "/")
    page.evaluate("localStorage.setItem('parley.model', 'other')")  # picked when it was listed
    open_app(page, limited.url)
    expect(page.locator("#model option")).to_have_count(1)  # the list has loaded
    expect(page.locator("#model-row")).to_be_hidden()
    send(page, "which model?")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    assert sends == [{"content": "which model?", "model": "parley-fake"}]


def test_one_model_shows_no_picker(page: Page, context: BrowserContext, server: Server) -> None:
    api = log_in(context, server)
    open_app(page, server.url)
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    assert len(api.get("/api/models")["data"]) == 1
    expect(page.locator("#model option")).to_have_count(1)  # the list has loaded
    expect(page.locator("#model-row")).to_be_hidden()
    expect(picker(page)).to_have_count(0)
