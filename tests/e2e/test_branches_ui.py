"""Branches in a real headless Chromium (issue 21): edit a question and switch between the
versions (each shows the answer made for it, after a reload too); regenerate an answer."""

from __future__ import annotations

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=5, tokens=12))


def message(page: Page, role: str, text: str) -> Locator:
    return page.locator(f"li.message.{role}", has_text=text)


def test_edit_switch_and_regenerate(context: BrowserContext, page: Page, quick: Server) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Versions"})
    for text in ("/echo first version", "/echo follow up"):
        api.wait_run(api.send(chat["id"], text)["run_id"])
    page.goto(f"{quick.url}/c/{chat['id']}")
    expect(message(page, "assistant", "follow up")).to_be_visible()

    message(page, "user", "first version").get_by_role("button", name="Edit").click()
    page.get_by_role("textbox", name="Edit your message").fill("/echo second version")
    page.get_by_role("button", name="Send", exact=True).first.click()
    expect(message(page, "assistant", "second version")).to_be_visible()
    expect(message(page, "user", "follow up")).to_have_count(0)  # the other branch
    edited = message(page, "user", "second version")
    expect(edited.locator(".branch-position")).to_have_text("2/2")
    shot(page, "branch-edited")

    edited.get_by_role("button", name="Previous version").click()
    expect(message(page, "assistant", "follow up")).to_be_visible()
    expect(message(page, "user", "first version").locator(".branch-position")).to_have_text("1/2")
    page.reload()  # the branch shown is the chat's, not the page's
    expect(message(page, "assistant", "follow up")).to_be_visible()
    message(page, "user", "first version").get_by_role("button", name="Next version").click()
    expect(message(page, "assistant", "second version")).to_be_visible()
    expect(message(page, "assistant", "follow up")).to_have_count(0)

    message(page, "assistant", "second version").get_by_role("button", name="Regenerate").click()
    answer = page.locator("li.message.assistant").last
    expect(answer.locator(".branch-position")).to_have_text("2/2")
    expect(answer).to_contain_text("second version")
