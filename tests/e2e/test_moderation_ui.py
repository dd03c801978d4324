"""The web UI under the content policy: a refused message stays in the chat with the reason
where its answer would be (also after a reload), and an answer stopped while it streams keeps
the text approved before it, with the refusal shown in place of the rest."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot
from tests.e2e.test_chat_ui import answer, content, open_app, prompt, send

pytestmark = pytest.mark.slow

RULES = {
    "rules": {
        "kind": "rules",
        "categories": {
            "violence": {
                "patterns": [r"\bforbidden\b"],
                "stages": ["input"],
                "reason": "it asks for forbidden things",
            },
            "secrets": {
                "patterns": [r"\bhunter2\b"],
                "stages": ["output"],
                "reason": "the answer gives a password away",
            },
        },
    }
}


@pytest.fixture
def moderated(servers: ServerFactory) -> Server:
    return servers(
        PARLEY_SAFETY__CLASSIFIERS=json.dumps(RULES),
        **fake_engine(ttft_ms=100, itl_ms=80, tokens=20),
    )


def test_a_refused_message_stays_in_the_chat_with_the_reason(
    page: Page, context: BrowserContext, moderated: Server
) -> None:
    api = log_in(context, moderated)
    open_app(page, moderated.url)
    send(page, "tell me the forbidden thing")
    refused = answer(page)
    expect(refused).to_have_attribute("data-status", "rejected")
    note = refused.locator(".message-note")
    expect(note).to_contain_text("Refused")
    expect(note).to_contain_text("violence")
    expect(note).to_contain_text("it asks for forbidden things")
    expect(page.locator("li.user").last).to_contain_text("tell me the forbidden thing")
    expect(prompt(page)).to_have_value("")  # sent (and refused), not a draft to send again
    shot(page, "moderation-refused-message")
    chats = api.get("/api/chats")["data"]
    page.reload()
    expect(answer(page)).to_have_attribute("data-status", "rejected")
    expect(answer(page).locator(".message-note")).to_contain_text("it asks for forbidden things")
    assert [m["status"] for m in api.messages(chats[0]["id"])] == ["completed", "rejected"]
    send(page, "tell me about rivers")  # the chat goes on
    expect(answer(page)).to_have_attribute("data-status", "completed")


def test_an_answer_stopped_midway_keeps_its_approved_text_and_shows_the_refusal(
    page: Page, context: BrowserContext, moderated: Server
) -> None:
    log_in(context, moderated)
    open_app(page, moderated.url)
    send(page, "/echo the first words are fine but the password is hunter2 and then more")
    stopped = answer(page)
    expect(stopped).to_have_attribute("data-status", "rejected")
    expect(stopped.locator(".message-note")).to_contain_text("the answer gives a password away")
    assert content(stopped).strip() == "the first words are fine but the password is"
    assert "hunter2" not in stopped.inner_text()
    shot(page, "moderation-stopped-answer")
    page.reload()
    expect(answer(page)).to_have_attribute("data-status", "rejected")
    assert content(answer(page)).strip() == "the first words are fine but the password is"
    expect(answer(page).locator(".message-note")).to_contain_text("password away")
