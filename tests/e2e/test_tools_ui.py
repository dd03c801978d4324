"""A chat that calls two of the server's tools, in a real headless Chromium (issue 43): the
user ticks the tools for the chat, the fake engine's scripted calls run, each call shows
as a folded step with its status and result, a reload in the middle of the answer resumes
it (the steps, the choice of tools and the answer all still there), and the answer is made
from the tools' results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot
from tests.tools.notes_process import NotesServer

pytestmark = pytest.mark.slow


@pytest.fixture
def tools_server(servers: ServerFactory) -> Server:
    # a slow answer after the tools: time to reload in the middle of it
    return servers(**fake_engine(ttft_ms=100, itl_ms=200, tokens=60))


def test_a_chat_calls_two_tools_and_survives_a_reload(
    context: BrowserContext, page: Page, tools_server: Server
) -> None:
    api = log_in(context, tools_server)
    chat = api.post("/api/chats", {"title": "Herons"})
    api.wait_run(api.send(chat["id"], "/echo my heron is called Gwendolyn")["run_id"])
    fact = next(m for m in api.messages(chat["id"]) if m["role"] == "user")
    page.goto(f"{tools_server.url}/c/{chat['id']}")
    page.get_by_label("Search my chats").check()
    page.get_by_label("Read my messages").check()
    read = json.dumps({"chat_id": chat["id"], "message_id": fact["id"]})
    page.locator("#prompt").fill(
        f'/call search_chats {{"query": "Gwendolyn"}}\nread_message {read}'
    )
    page.keyboard.press("Enter")
    steps = page.locator("li.assistant").last.locator("details.tool-call")
    expect(steps).to_have_count(2)
    expect(steps.nth(0).locator("summary")).to_have_text("Called search_chats · ok")
    expect(steps.nth(1).locator("summary")).to_have_text("Called read_message · ok")
    expect(page.locator("li.assistant").last.locator(".content")).to_contain_text("Tools said")
    page.reload()  # mid-answer: the rest of it streams in after the reload
    answer = page.locator("li.assistant").last
    expect(answer.locator("details.tool-call")).to_have_count(2)
    expect(page.get_by_label("Search my chats")).to_be_checked()  # the chat's choice
    expect(answer).to_have_attribute("data-status", "completed", timeout=60_000)
    expect(answer.locator(".content")).to_contain_text("Gwendolyn")
    answer.locator("details.tool-call").nth(1).locator("summary").click()
    expect(answer.locator("details.tool-call").nth(1).locator(".tool-output")).to_contain_text(
        "my heron is called Gwendolyn"
    )
    expect(answer.locator("details.tool-call").nth(0).locator("summary")).to_have_text(
        "Called search_chats · ok"
    )
    shot(page, "tools-after-reload")
    (run,) = [m for m in api.messages(chat["id"]) if m.get("tool_steps")]
    assert [s["function"]["name"] for s in run["tool_steps"]] == ["search_chats", "read_message"]


@pytest.fixture
def confirm_server(servers: ServerFactory) -> Server:
    return servers(
        **fake_engine(ttft_ms=50, itl_ms=20, tokens=20),
        PARLEY_TOOLS__CONFIRM='["search_chats"]',
    )


def test_a_marked_tool_asks_the_user_first(
    context: BrowserContext, page: Page, confirm_server: Server
) -> None:
    api = log_in(context, confirm_server)
    chat = api.post("/api/chats", {"title": "Asking"})
    page.goto(f"{confirm_server.url}/c/{chat['id']}")
    page.get_by_label("Search my chats").check()
    for allow, status in ((True, "ok"), (False, "refused")):
        page.locator("#prompt").fill('/call search_chats {"query": "heron"}')
        page.keyboard.press("Enter")
        answer = page.locator("li.assistant").last
        button = answer.get_by_role("button", name="Allow" if allow else "Deny")
        expect(button).to_be_visible()
        shot(page, f"tool-confirm-{status}")
        button.click()
        expect(answer.locator("details.tool-call summary")).to_have_text(
            f"Called search_chats · {status}"
        )
        expect(answer).to_have_attribute("data-status", "completed")
        expect(answer.get_by_role("button", name="Allow")).to_have_count(0)


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[NotesServer]:
    server = NotesServer(tmp_path, 3600)
    server.start()
    yield server
    server.close()


def test_a_user_connects_an_mcp_server_with_their_own_account(
    context: BrowserContext, page: Page, servers: ServerFactory, notes: NotesServer
) -> None:
    tier = {"priority": 0, "tokens_per_minute": 100_000, "burst_tokens": 100_000,
            "max_concurrent_runs": 2, "max_output_tokens": 200, "tools": ["mcp:notes"]}  # fmt: skip
    server = servers(
        **fake_engine(ttft_ms=20, itl_ms=10, tokens=20),
        PARLEY_TIERS=json.dumps({"free": tier}),
        PARLEY_TOOLS__MCP_SERVERS=json.dumps([{"name": "notes", "url": notes.url, "oauth": {}}]),
    )
    log_in(context, server)
    page.goto(server.url)
    choice = page.get_by_label("MCP: notes")
    expect(choice).to_be_disabled()  # not connected yet
    page.get_by_role("button", name="Connect").click()
    page.get_by_label("User").fill("ada")  # the MCP server's own sign-in page
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{server.url}/")  # back, the address cleaned of ?connected=
    expect(page.get_by_role("button", name="Disconnect")).to_be_visible()
    expect(page.locator("#errors")).to_be_empty()
    page.get_by_label("MCP: notes").check()
    page.locator("#prompt").fill("/call notes__whoami {}")
    page.keyboard.press("Enter")
    answer = page.locator("li.assistant").last
    expect(answer.locator("details.tool-call summary")).to_have_text("Called notes__whoami · ok")
    answer.locator("details.tool-call summary").click()
    expect(answer.locator(".tool-output")).to_contain_text("you are ada")
    shot(page, "tools-mcp-connected")
    page.get_by_role("button", name="Disconnect").click()
    expect(page.get_by_label("MCP: notes")).to_be_disabled()
