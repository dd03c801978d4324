"""The web UI through a database failover: a send or a new chat refused with 503
``dependency_unavailable`` waits on the busy banner and is retried by itself; a send is
retried with its one Idempotency-Key, so a message the server stored before its answer was
lost is not stored twice."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import Server, log_in
from tests.e2e.test_chat_ui import answer, chat_id_of, content, open_app, send

pytestmark = pytest.mark.slow

FAILING_OVER = {
    "error": {
        "type": "service_unavailable",
        "code": "dependency_unavailable",
        "message": "the database cannot be reached just now; retry in a few seconds",
        "param": None,
        "retry_after": 1,
    }
}


def refuse(route: Any) -> None:
    route.fulfill(
        status=503,
        headers={"Content-Type": "application/json", "Retry-After": "1"},
        body=json.dumps(FAILING_OVER),
    )


def test_a_send_stored_but_answered_503_is_retried_with_its_key_and_stored_once(
    page: Page, context: BrowserContext, server: Server
) -> None:
    """The first POST reaches the server, which stores the message and starts its run, but
    the page is answered 503 (as when the primary fails over as the answer goes out): the
    banner counts down, the page sends again with the same Idempotency-Key, and follows the
    run the first POST made: one message, one answer."""
    api = log_in(context, server)
    open_app(page, server.url)
    keys: list[str | None] = []

    def lost_answer(route: Any) -> None:
        keys.append(route.request.headers.get("idempotency-key"))
        if len(keys) == 1:
            route.fetch(timeout=60_000)  # stored, its answer generated: then lost
            refuse(route)
        else:
            route.continue_()

    page.route("**/api/chats/*/messages", lost_answer)
    send(page, "hello through a failover")
    expect(page.locator("#banner")).to_contain_text("busy")
    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed", timeout=60_000)
    assert len(keys) == 2 and keys[0] is not None and keys[0] == keys[1], keys
    stored = api.messages(chat_id_of(page))
    assert [m["content"] for m in stored if m["role"] == "user"] == ["hello through a failover"]
    assert len([m for m in stored if m["role"] == "assistant"]) == 1
    assert content(message) == stored[-1]["content"]


def test_a_new_chat_refused_with_503_is_made_when_the_banner_retries(
    page: Page, context: BrowserContext, server: Server
) -> None:
    """The first message of a new chat: making the chat is refused once (the database failing
    over); the banner retries it, then the message is sent. One chat, one message."""
    api = log_in(context, server)
    open_app(page, server.url)
    creates: list[str] = []

    def refuse_first_create(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        creates.append(route.request.url)
        if len(creates) == 1:
            refuse(route)
        else:
            route.continue_()

    page.route("**/api/chats", refuse_first_create)
    send(page, "a new chat through a failover")
    expect(page.locator("#banner")).to_contain_text("busy")
    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed", timeout=60_000)
    assert len(creates) == 2, creates
    chats = api.get("/api/chats")["data"]
    assert len(chats) == 1 and chats[0]["id"] == chat_id_of(page)
    stored = api.messages(chat_id_of(page))
    assert [m["content"] for m in stored if m["role"] == "user"] == [
        "a new chat through a failover"
    ]
