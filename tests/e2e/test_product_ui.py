"""The web UI as a whole product (issue 46), in a real headless Chromium: each numbered
defect of the issue, then each new feature (message actions, custom instructions, temporary
chats, the sidebar's groups, pins and archive)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=5, tokens=12))


def message(page: Page, role: str, text: str) -> Locator:
    return page.locator(f"li.message.{role}", has_text=text)


def test_1_a_search_hit_on_another_branch_opens_that_branch(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Capitals"})
    first = api.send(chat["id"], "/echo tell me about Rome")
    api.wait_run(first["run_id"])
    question = api.messages(chat["id"])[0]
    edit = {"content": "/echo tell me about Athens", "edit_of": question["id"]}
    edited = api.post(f"/api/chats/{chat['id']}/messages", edit, Accept="application/json")
    api.wait_run(edited["run_id"])
    back = api.client.put(f"/api/chats/{chat['id']}/branch", json={"message_id": question["id"]})
    assert back.status_code == 200, back.text

    page.goto(quick.url)
    page.get_by_role("searchbox", name="Search chats").fill("athens")
    page.locator(".search-link").first.click()
    hit = message(page, "user", "Athens")
    expect(hit).to_be_visible()
    expect(hit).to_have_class(re.compile(r"\bsearch-hit\b"))
    expect(message(page, "user", "Rome")).to_have_count(0)
    expect(page.locator("#errors .error-item")).to_have_count(0)

    other = api.post("/api/chats", {"title": "Elsewhere"})
    page.goto(f"{quick.url}/c/{chat['id']}#m-nonexistent")
    expect(page.locator("#errors .error-item")).to_have_count(1)
    page.locator(".chat-item", has_text="Elsewhere").click()
    expect(page.locator("#chat-title")).to_have_text("Elsewhere")
    expect(page.locator("#errors .error-item")).to_have_count(0)  # the bar does not follow
    assert other["id"]
