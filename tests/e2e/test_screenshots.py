"""The README's pictures, taken from the product as it is (`make screenshots` copies them to
docs/screenshots/): a chat with a markdown answer, its actions and versions, the sidebar's
pinned chat and date groups; and the same at phone width."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot
from tests.e2e.test_chat_ui import MARKDOWN_ANSWER

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=2, tokens=40))


def test_the_readme_pictures(
    context: BrowserContext, page: Page, quick: Server, browser: Browser
) -> None:
    api = log_in(context, quick, email="ada@example.com")
    for title in ("Trip to Lisbon", "Quarterly numbers", "Rivers of Europe"):
        api.post("/api/chats", {"title": title})
    pinned = api.post("/api/chats", {"title": "Team style guide"})
    api.client.patch(f"/api/chats/{pinned['id']}", json={"pinned": True})
    chat = api.post("/api/chats", {"title": "What a paged KV cache buys"})
    first = api.send(chat["id"], "What does a paged KV cache buy us?")
    api.wait_run(first["run_id"])
    question = api.messages(chat["id"])[0]
    edit = {"content": "/echo " + MARKDOWN_ANSWER, "edit_of": question["id"]}
    done = api.post(f"/api/chats/{chat['id']}/messages", edit, Accept="application/json")
    api.wait_run(done["run_id"])
    answer = api.messages(chat["id"])[-1]
    api.client.put(
        f"/api/chats/{chat['id']}/messages/{answer['id']}/feedback", json={"rating": "up"}
    )

    page.set_viewport_size({"width": 1280, "height": 860})
    page.goto(f"{quick.url}/c/{chat['id']}")
    expect(page.locator("li.assistant .answer-meta")).to_be_visible()
    expect(page.locator(".chat-group-title")).to_have_text(["Pinned", "Today"])
    shot(page, "readme-chat")

    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone.add_cookies(context.cookies())  # type: ignore[arg-type]
    small = phone.new_page()
    small.goto(f"{quick.url}/c/{chat['id']}")
    expect(small.locator("li.assistant .answer-meta")).to_be_visible()
    shot(small, "readme-phone")
    phone.close()
