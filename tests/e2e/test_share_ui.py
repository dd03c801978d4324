"""Shared links in a real headless Chromium (issue 21): share the open chat from the top
bar, open the link in a fresh browser context with no session (the snapshot's messages,
answers as Markdown, a noindex page), then revoke it from the list: the link is 404."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.conftest import (
    PLAYWRIGHT_TIMEOUT_MS,
    Server,
    ServerFactory,
    fake_engine,
    log_in,
    shot,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def share_server(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=5, tokens=40))


def test_a_shared_link_opens_without_a_session_until_revoked(
    browser: Browser, context: BrowserContext, page: Page, share_server: Server
) -> None:
    api = log_in(context, share_server)
    chat = api.post("/api/chats", {"title": "Worth sharing"})
    for question in ("/echo plain <b>question</b>", "/echo some **bold** words"):
        api.wait_run(api.send(chat["id"], question)["run_id"])
    page.goto(f"{share_server.url}/c/{chat['id']}")
    expect(page.locator("li.assistant")).to_have_count(2)

    page.get_by_role("button", name="Share", exact=True).click()
    url_box = page.locator("#share-url")
    expect(url_box).to_be_visible()
    link = url_box.input_value()
    assert link.startswith(f"{share_server.url}/s/"), link
    expect(page.locator("li.share-item")).to_have_count(1)
    expect(page.locator("li.share-item")).to_contain_text("Worth sharing")
    shot(page, "share-created")

    reader = browser.new_context(viewport={"width": 1000, "height": 800})
    reader.set_default_timeout(PLAYWRIGHT_TIMEOUT_MS)
    try:
        assert reader.cookies() == []
        shared = reader.new_page()
        errors: list[str] = []
        shared.on("pageerror", lambda exc: errors.append(str(exc)))
        response = shared.goto(link)
        assert response is not None and response.status == 200
        assert response.headers["x-robots-tag"] == "noindex, nofollow"
        robots = shared.locator('meta[name="robots"]')
        assert "noindex" in (robots.get_attribute("content") or "")
        expect(shared.locator("h1")).to_have_text("Worth sharing")
        expect(shared.locator("li.message")).to_have_count(4)
        expect(shared.locator("li.user").first).to_contain_text("/echo plain <b>question</b>")
        expect(shared.locator("li.assistant").last.locator("strong")).to_have_text("bold")
        expect(shared.locator("#prompt")).to_have_count(0)  # read-only: no composer
        shot(shared, "share-read")

        api.wait_run(api.send(chat["id"], "/echo said later")["run_id"])
        shared.reload()
        expect(shared.locator("li.message")).to_have_count(4)  # a snapshot

        page.locator("li.share-item").get_by_role("button", name="Revoke").click()
        expect(page.locator("li.share-item")).to_have_count(0)
        response = shared.reload()
        assert response is not None and response.status == 404
        expect(shared.locator("h1")).to_have_text("This link does not exist")
        shot(shared, "share-revoked")
        assert errors == []
    finally:
        reader.close()
