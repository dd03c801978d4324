"""Search in a real headless Chromium (issue 21): a word from an old chat is found from the
sidebar's search box, its snippet highlighted, and the result opens the chat at that
message (paging back past the newest messages to reach it)."""

from __future__ import annotations

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot

pytestmark = pytest.mark.slow

TURNS = 20  # 40 messages: more than the chat view's first page (30)


@pytest.fixture
def search_server(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=1, tokens=8))


def test_search_finds_a_word_from_an_old_chat_and_opens_it_at_that_message(
    context: BrowserContext, page: Page, search_server: Server
) -> None:
    api = log_in(context, search_server)
    old = api.post("/api/chats", {"title": "Travel notes"})
    for turn in range(TURNS):
        said = "we sailed to Zanzibar <b>at dawn</b>" if turn == 1 else f"turn {turn}"
        api.wait_run(api.send(old["id"], f"/echo {said}")["run_id"])
    newer = api.post("/api/chats", {"title": "Groceries"})
    api.wait_run(api.send(newer["id"], "/echo apples and pears")["run_id"])
    planted = next(m for m in api.messages(old["id"]) if "Zanzibar" in m["content"])

    page.goto(search_server.url + "/")
    expect(page.locator("#shell")).to_be_visible()
    page.get_by_role("searchbox", name="Search chats").fill("zanzibar")
    results = page.locator("#search-list li.search-item")
    expect(results.first).to_be_visible()
    expect(page.locator("#chat-scroll")).to_be_hidden()
    hit = page.locator(f'a.search-link[href="/c/{old["id"]}#m-{planted["id"]}"]')
    expect(hit).to_contain_text("Travel notes")
    expect(hit.locator("mark")).to_have_text("Zanzibar")
    expect(hit.locator(".search-snippet")).to_contain_text("<b>at dawn</b>")  # text, not markup
    expect(hit.locator(".search-snippet b")).to_have_count(0)
    shot(page, "search-results")

    hit.click()
    expect(page).to_have_url(f"{search_server.url}/c/{old['id']}#m-{planted['id']}")
    found = page.locator(f'li[data-message-id="{planted["id"]}"]')
    expect(found).to_have_class("message user search-hit")
    expect(found).to_contain_text("Zanzibar")
    expect(found).to_be_in_viewport()
    expect(page.locator("#chat-title")).to_have_text("Travel notes")
    shot(page, "search-opened")

    box = page.get_by_role("searchbox", name="Search chats")  # Escape: the chat list again
    box.press("Escape")
    expect(page.locator("#chat-scroll")).to_be_visible()
    expect(page.locator("#search-results")).to_be_hidden()
