"""The web UI in a real headless Chromium: what a chat user sees and does."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Response, expect

from tests.e2e.conftest import (
    ANSWER_TOKENS,
    PASSWORD,
    Api,
    Server,
    ServerFactory,
    fake_engine,
    log_in,
    shot,
)
from tests.e2e.proxy import CuttableProxy
from tests.waiting import eventually_sync

pytestmark = pytest.mark.slow


def prompt(page: Page) -> Locator:
    return page.get_by_role("textbox", name="Message")


def send(page: Page, text: str) -> None:
    prompt(page).fill(text)
    prompt(page).press("Enter")


def answer(page: Page, n: int = -1) -> Locator:
    answers = page.locator("li.assistant")
    return answers.nth(n) if n >= 0 else answers.last


def content(message: Locator) -> str:
    return message.locator(".content").inner_text()


def open_app(page: Page, url: str, path: str = "/") -> None:
    page.goto(url + path)
    expect(page.locator("#shell")).to_be_visible()


def chat_id_of(page: Page) -> str:
    match = re.search(r"/c/([^/]+)$", page.url)
    assert match, page.url
    return match.group(1)


SOME_WORDS = re.compile(r"\w+ \w+ \w+")


def answering(
    page: Page, context: BrowserContext, server: Server, text: str
) -> tuple[Api, Locator]:
    """A new user sends ``text``; returns once the answer shows its first words."""
    api = log_in(context, server)
    open_app(page, server.url)
    send(page, text)
    message = answer(page)
    expect(message.locator(".content")).to_contain_text(SOME_WORDS)
    return api, message


def lengths_while_streaming(message: Locator, timeout: float = 60) -> list[int]:
    """The answer's text length, sampled until the message leaves in_progress."""
    seen: list[int] = []

    def finished() -> bool:
        if message.get_attribute("data-status") != "in_progress":
            return True
        seen.append(len(content(message)))
        return False

    eventually_sync(finished, "the answer to finish streaming", timeout=timeout)
    return seen


def test_sign_up_log_out_and_log_in(page: Page, server: Server) -> None:
    email = server.new_email()
    page.goto(server.url + "/")
    expect(page.get_by_role("heading", name="Log in to parley")).to_be_visible()
    shot(page, "01-log-in")
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", name="Create your parley account")).to_be_visible()
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill("short")
    page.get_by_role("button", name="Sign up").click()
    expect(page.locator("#auth-error")).to_contain_text("at least 8 characters")

    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    expect(page.locator("#shell")).to_be_visible()
    expect(page.locator("#account-email")).to_have_text(email)
    expect(page.locator("#account-tier")).to_have_text("Free tier")
    expect(page.locator("#budget-text")).to_contain_text("tokens")
    expect(page.get_by_role("heading", name="What can I help with?")).to_be_visible()
    shot(page, "02-new-chat")

    page.get_by_role("button", name="Log out").click()
    expect(page.locator("#auth-notice")).to_have_text("You have logged out.")
    page.reload()  # the session is gone on the server too, not just hidden
    expect(page.get_by_role("heading", name="Log in to parley")).to_be_visible()

    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill("wrong password!")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#auth-error")).not_to_be_empty()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#account-email")).to_have_text(email)
    page.goto(server.url + "/")
    expect(page.locator("#shell")).to_be_visible()  # the cookie keeps the session


def test_the_answer_streams_token_by_token(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api = log_in(context, server)
    open_app(page, server.url)
    box = prompt(page)
    box.fill("first line")
    box.press("Shift+Enter")
    box.type("second line")
    assert box.input_value() == "first line\nsecond line"  # Shift+Enter: a new line
    box.press("Enter")  # Enter: send

    user = page.locator("li.user").last
    expect(user.locator(".content")).to_have_text("first line\nsecond line")
    message = answer(page)
    expect(message).to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    expect(page.get_by_role("log", name="Conversation")).to_have_attribute("aria-live", "polite")
    seen = lengths_while_streaming(message)

    grew = sorted(set(seen))
    assert len(grew) >= 8, f"the answer did not grow token by token: {seen}"
    assert seen == sorted(seen), f"the answer shrank while streaming: {seen}"
    expect(message).to_have_attribute("data-status", "completed")
    expect(message).to_have_attribute("aria-busy", "false")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()

    chat = chat_id_of(page)
    stored = api.messages(chat)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == "first line\nsecond line"
    assert stored[1]["status"] == "completed"
    assert content(message) == stored[1]["content"]
    assert len(stored[1]["content"]) > max(seen[:3])  # it was not all there at once
    # the new chat is in the sidebar, titled by the first line, and is the open one
    item = page.locator("li.chat-item").first
    expect(item.locator(".chat-link")).to_have_text("first line")
    expect(item.locator(".chat-link")).to_have_attribute("aria-current", "page")
    expect(page.locator("#chat-title")).to_have_text("first line")


def test_a_screenshot_while_streaming(page: Page, context: BrowserContext, server: Server) -> None:
    log_in(context, server)
    open_app(page, server.url)
    send(page, "What does a paged KV cache buy us?")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    send(page, "/echo " + MARKDOWN_ANSWER)
    message = answer(page)
    expect(message.locator("pre code")).to_contain_text("block_table")  # mid code block
    expect(message).to_have_attribute("data-status", "in_progress")
    shot(page, "03-streaming")
    expect(message).to_have_attribute("data-status", "completed")
    expect(message.get_by_role("heading", name="Paging the cache")).to_be_visible()
    expect(message.locator("ol > li")).to_have_count(2)
    expect(message.locator("ul > li")).to_have_count(3)
    shot(page, "chat")


MARKDOWN_ANSWER = """### Paging the cache

A paged cache splits each sequence's keys and values into **fixed-size blocks**:

1. blocks are allocated on demand, so memory follows the *actual* length;
2. equal prefixes hash to the same blocks and are computed once.

```python
def slot(block_table, position, block_size=16):
    block = block_table[position // block_size]
    return block * block_size + position % block_size
```

Three things follow for a chat service:

- the next turn of a long conversation reuses the cached prefix, so its *first token*
  arrives in a fraction of the time;
- a stopped answer frees its blocks at once;
- sequences join and leave the running batch at every step.

That is why `parley` schedules by **priority, then age**, and never by request count."""


def test_reload_mid_answer_rejoins_and_completes(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api, message = answering(page, context, server, "a long answer, please")
    before = content(message)

    page.reload()
    message = answer(page)
    expect(message).to_have_attribute("data-status", "in_progress")  # shown streaming again
    seen = lengths_while_streaming(message)
    assert len(set(seen)) >= 3, f"after the reload the answer did not stream: {seen}"
    expect(message).to_have_attribute("data-status", "completed")

    stored = api.messages(chat_id_of(page))[-1]
    assert stored["status"] == "completed"
    assert content(message) == stored["content"]
    assert stored["content"].startswith(before)
    assert page.locator("li.assistant").count() == 1  # no duplicate answer


def test_a_chat_opened_mid_answer_shows_it_streaming(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api, _ = answering(page, context, server, "keep going while I look elsewhere")
    chat = chat_id_of(page)

    page.get_by_role("button", name="New chat").click()
    expect(page.locator("li.assistant")).to_have_count(0)
    page.locator(f'li.chat-item[data-chat-id="{chat}"] .chat-link').click()
    message = answer(page)
    expect(message).to_have_attribute("data-status", "in_progress")
    seen = lengths_while_streaming(message)
    assert len(set(seen)) >= 2, seen
    assert content(message) == api.messages(chat)[-1]["content"]


def test_a_dropped_connection_resumes_the_answer(
    page: Page, context: BrowserContext, server: Server
) -> None:
    proxy = CuttableProxy(int(server.url.rsplit(":", 1)[1]))
    try:
        through_proxy = Server(proxy.url, server.proc)
        api, message = answering(page, context, through_proxy, "stay with me through a blip")
        assert proxy.cut() >= 1  # every connection reset, the SSE stream among them
        seen = lengths_while_streaming(message)
        expect(message).to_have_attribute("data-status", "completed")
        stored = api.messages(chat_id_of(page))[-1]
        assert content(message) == stored["content"]  # no gap, no duplicate
        assert len(set(seen)) >= 2, seen
    finally:
        proxy.close()


def test_a_bus_outage_event_shows_reconnecting_and_resumes_after_retry_after(
    page: Page, context: BrowserContext, server: Server
) -> None:
    """The stream of the send is cut after its third delta by an ``error`` event of code
    ``dependency_unavailable`` (as the api ends a stream when its bus goes away): the
    answer shows "reconnecting", and the page resumes from the last event id only after the
    event's ``retry_after``, with nothing missing or repeated."""
    api = log_in(context, server)
    open_app(page, server.url)
    cut_at: list[float] = []
    resumed_at: list[float] = []

    def cut_short(route: Any) -> None:
        whole = route.fetch(timeout=60_000).text()
        frames = whole.split("\n\n")
        deltas = [i for i, f in enumerate(frames) if "event: delta" in f]
        outage = {"code": "dependency_unavailable", "message": "bus down", "retry_after": 2}
        body = "\n\n".join(frames[: deltas[2] + 1])
        body += f"\n\nevent: error\ndata: {json.dumps(outage)}\n\n"
        cut_at.append(time.monotonic())
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    def resumes(request: Any) -> None:
        if "/events" in request.url and request.headers.get("last-event-id"):
            resumed_at.append(time.monotonic())

    page.route("**/api/chats/*/messages", cut_short)
    page.on("request", resumes)
    send(page, "say something through an outage")
    message = answer(page)
    expect(message).to_contain_text("Connection lost; reconnecting")
    expect(message).to_have_attribute("data-status", "completed", timeout=30_000)
    assert resumed_at and cut_at
    assert resumed_at[0] - cut_at[0] >= 1.5  # after retry_after, not at once
    stored = api.messages(chat_id_of(page))[-1]
    assert content(message) == stored["content"]  # no gap, no duplicate


def test_stop_ends_the_answer_and_keeps_the_partial_text(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api, message = answering(page, context, server, "an answer I will stop")
    page.get_by_role("button", name="Stop", exact=True).click()

    expect(message).to_have_attribute("data-status", "cancelled")
    expect(message.locator(".message-note")).to_have_text("Stopped")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()
    shot(page, "05-stopped")
    stored = api.messages(chat_id_of(page))[-1]
    assert stored["status"] == "cancelled"
    assert stored["content"] == content(message)
    assert 0 < len(stored["content"].split()) < ANSWER_TOKENS  # partial: stopped early
    run = api.get(f"/api/runs/{stored['run_id']}")
    assert run["status"] == "cancelled"


def test_markup_in_an_answer_renders_as_text(
    page: Page, context: BrowserContext, server: Server
) -> None:
    log_in(context, server)
    open_app(page, server.url)
    attack = (
        '/echo Look: <img src=x onerror="window.pwned=1"> and '
        "<script>window.pwned=2</script> <b>bold?</b>\n\n"
        "```html\n<script>window.pwned=3</script>\n```\n"
        "- **real bold** and `code`\n- [a link](javascript:window.pwned=4)"
    )
    send(page, attack)
    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed")
    text = content(message)
    assert '<img src=x onerror="window.pwned=1">' in text
    assert "<script>window.pwned=2</script>" in text
    assert "<b>bold?</b>" in text
    for tag in ("img", "script", "b", "iframe"):
        assert page.locator(f"#message-list {tag}").count() == 0, tag
    # the markdown itself is rendered: a code block, a list, bold, inline code
    expect(message.locator("pre code")).to_have_text("<script>window.pwned=3</script>")
    expect(message.locator("li strong")).to_have_text("real bold")
    expect(message.locator("li code")).to_have_text("code")
    assert message.locator("a").count() == 0  # javascript: links stay text
    assert page.evaluate("window.pwned") is None
    # the user's own message is text too
    expect(page.locator("li.user .content")).to_have_text(attack)
    shot(page, "06-markup-as-text")


def test_chat_list_pages_as_it_scrolls_and_chats_rename_and_delete(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api = log_in(context, server)
    for n in range(60):
        api.post("/api/chats", {"title": f"Chat {n:02d}"})
    open_app(page, server.url)
    items = page.locator("li.chat-item .chat-link")
    expect(items).to_have_count(20)  # one page, not all 60
    expect(items.first).to_have_text("Chat 59")  # newest first
    for expected in (40, 60):
        page.locator("#chat-scroll").evaluate("el => el.scrollTo(0, el.scrollHeight)")
        expect(items).to_have_count(expected)
    titles = items.all_inner_texts()
    assert titles == [f"Chat {n:02d}" for n in range(59, -1, -1)]
    shot(page, "07-chat-list")

    # by keyboard: Tab from a chat's link reaches its rename button; Escape cancels
    page.locator("li.chat-item .chat-link").filter(has_text="Chat 31").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    field = page.get_by_role("textbox", name="New chat title")
    expect(field).to_be_focused()
    expect(field).to_have_value("Chat 31")
    page.keyboard.press("Escape")
    expect(field).to_have_count(0)
    expect(page.locator("li.chat-item .chat-link").filter(has_text="Chat 31")).to_be_focused()

    target = page.locator("li.chat-item").filter(has_text="Chat 30")
    target.hover()
    target.get_by_role("button", name="Rename chat “Chat 30”").click()
    field.fill("Renamed chat")
    field.press("Enter")
    expect(page.locator("li.chat-item .chat-link").filter(has_text="Renamed chat")).to_have_count(1)
    chats = api.get("/api/chats", limit=100)["data"]
    assert "Renamed chat" in [c["title"] for c in chats]

    page.once("dialog", lambda dialog: dialog.accept())
    doomed = page.locator("li.chat-item").filter(has_text="Chat 10")
    doomed_id = doomed.get_attribute("data-chat-id")
    doomed.hover()
    doomed.get_by_role("button", name="Delete chat “Chat 10”").click()
    expect(page.locator("li.chat-item").filter(has_text="Chat 10")).to_have_count(0)
    assert api.client.get(f"/api/chats/{doomed_id}").status_code == 404


def test_older_messages_load_on_scroll_up(
    page: Page, context: BrowserContext, servers: ServerFactory
) -> None:
    fast = servers(**fake_engine(ttft_ms=0, itl_ms=0, tokens=3))
    api = log_in(context, fast)
    chat = api.post("/api/chats", {"title": "A long conversation"})["id"]
    for n in range(40):  # 80 messages: three pages of 30
        run = api.send(chat, f"question {n:02d}")
        api.wait_run(run["run_id"])
    open_app(page, fast.url, f"/c/{chat}")
    users = page.locator("li.user .content")
    expect(users.last).to_have_text("question 39")
    expect(page.locator("li.message")).to_have_count(30)
    for expected in (60, 80):
        page.locator("#messages").evaluate("el => el.scrollTo(0, 0)")
        expect(page.locator("li.message")).to_have_count(expected)
    assert users.all_inner_texts() == [f"question {n:02d}" for n in range(40)]


# Records what the banner shows: a snapshot of it at every change, so that each countdown's
# first value is known (wait() writes the text, then shows the banner).
RECORD_BANNER = """() => {
  window.bannerLog = [];
  const banner = document.getElementById("banner");
  const text = document.getElementById("banner-text");
  new MutationObserver(() => {
    window.bannerLog.push({ hidden: banner.hidden, text: text.textContent });
  }).observe(banner, { attributes: true, childList: true, characterData: true, subtree: true });
}"""


def countdowns(log: list[dict[str, Any]]) -> list[list[int]]:
    """The seconds each showing of the banner counted, from the recorded snapshots."""
    shown: list[list[int]] = []
    hidden = True
    for snap in log:
        if snap["hidden"]:
            hidden = True
            continue
        match = re.search(r"Retrying in (\d+) s", snap["text"])
        assert match, snap
        if hidden:
            shown.append([])
        if not shown[-1] or shown[-1][-1] != int(match.group(1)):
            shown[-1].append(int(match.group(1)))
        hidden = False
    return shown


def test_busy_service_shows_a_banner_and_retries_by_itself(
    page: Page, context: BrowserContext, servers: ServerFactory
) -> None:
    # one engine slot and a queue of one: two runs fill the service until the first one
    # ends (120 tokens at 50 ms: 6 s), so the page is refused more than once
    busy = servers(PARLEY_QUEUE_MAX="1", **fake_engine(ttft_ms=0, itl_ms=50, tokens=120, slots=1))
    api = log_in(context, busy)
    chat = api.post("/api/chats", {"title": "blockers"})["id"]
    blockers = [api.send(chat, f"block {n}") for n in range(2)]
    sends: list[tuple[int, str | None]] = []  # the page's POSTs: status, Retry-After

    def on_response(response: Response) -> None:
        if response.request.method == "POST" and response.url.endswith("/messages"):
            sends.append((response.status, response.headers.get("retry-after")))

    page.on("response", on_response)
    open_app(page, busy.url)
    page.evaluate(RECORD_BANNER)
    send(page, "hello when you have a moment")
    banner = page.locator("#banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text(re.compile(r"busy\. Retrying in \d+ s"))
    expect(answer(page).locator(".message-note")).to_have_text("Not sent yet: waiting to retry…")
    shot(page, "04-busy-banner")

    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed", timeout=60_000)
    assert all(api.wait_run(b["run_id"])["status"] == "completed" for b in blockers)
    stored = api.messages(chat_id_of(page))
    assert [m["content"] for m in stored if m["role"] == "user"] == [
        "hello when you have a moment"
    ]  # retried with one Idempotency-Key: one message, one run
    assert content(message) == stored[-1]["content"]

    # the first refusal's countdown starts from the server's Retry-After; later ones by the
    # free tier's guidance (exponential, jittered: 1-2 s, 2-4 s, ...), never sooner than it
    refused = [retry_after for status, retry_after in sends if status == 503]
    assert len(refused) >= 2, sends
    assert [status for status, _ in sends] == [503] * len(refused) + [200], sends
    shown = countdowns(page.evaluate("window.bannerLog"))
    told = [int(r or 0) for r in refused]
    assert len(shown) == len(told) and shown[0][0] == told[0], (shown, refused)
    for n, (countdown, said) in enumerate(zip(shown, told, strict=True)):
        assert said <= countdown[0] <= max(said, 2 * 2 ** (n - 1) if n else 0), (shown, told)
    assert any(len(c) >= 2 for c in shown), f"the banner did not count down: {shown}"


def test_narrow_screen_hides_the_sidebar_in_a_drawer(
    browser_context_narrow: BrowserContext, server: Server
) -> None:
    context = browser_context_narrow
    api = log_in(context, server)
    chat = api.post("/api/chats", {"title": "On the phone"})["id"]
    page = context.new_page()
    open_app(page, server.url)
    sidebar = page.locator("#sidebar")
    expect(sidebar).not_to_be_visible()
    toggle = page.get_by_role("button", name="Show chats")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(sidebar).to_be_in_viewport(ratio=1)  # slid fully in
    expect(toggle).to_have_attribute("aria-expanded", "true")
    shot(page, "08-narrow-drawer")
    page.locator(f'li.chat-item[data-chat-id="{chat}"] .chat-link').click()
    expect(sidebar).not_to_be_visible()
    expect(page.locator("#chat-title")).to_have_text("On the phone")
    send(page, "hi from a small screen")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, "the page scrolls sideways on a narrow screen"
    shot(page, "09-narrow-chat")


def test_errors_are_shown_and_the_draft_is_kept(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api = log_in(context, server)
    open_app(page, server.url)
    too_long = "x" * 32_001
    prompt(page).fill(too_long)
    prompt(page).press("Enter")
    errors = page.get_by_role("alert").filter(has_text="Your message was not sent")
    expect(errors).to_contain_text("at most 32000 characters")
    expect(prompt(page)).to_have_value(too_long)  # nothing the user typed is lost
    expect(page.locator("li.user.unsent")).to_have_count(1)
    expect(answer(page)).to_have_attribute("data-status", "failed")
    shot(page, "10-error-shown")

    # a session ended elsewhere: the next action asks to log in again, with the reason
    assert api.client.post("/api/auth/logout").status_code == 204
    send(page, "are you still there?")
    expect(page.get_by_role("heading", name="Log in to parley")).to_be_visible()
    expect(page.locator("#auth-notice")).to_contain_text("session has ended")


def test_budget_is_shown_and_a_spent_budget_says_when_it_refills(
    page: Page, context: BrowserContext, servers: ServerFactory
) -> None:
    # a tiny free tier: 150 tokens, refilling at 10 a second; an answer costs about 50
    tier = {
        "priority": 0,
        "tokens_per_minute": 600,
        "burst_tokens": 150,
        "max_concurrent_runs": 1,
        "max_output_tokens": 40,
    }
    small = servers(
        PARLEY_TIERS=json.dumps({"free": tier}),
        **fake_engine(ttft_ms=0, itl_ms=10, tokens=40),
    )
    api = log_in(context, small)
    open_app(page, small.url)
    budget = page.locator("#budget-text")
    expect(budget).to_have_text(re.compile(r"^150 of 150 tokens left"))
    banner = page.locator("#banner")
    for n in range(8):  # each answer costs about 50 tokens: the budget runs out
        send(page, f"question {n}")
        page.wait_for_function(
            "n => !document.getElementById('banner').hidden || document.querySelectorAll("
            "'li.assistant[data-status=\"completed\"]').length > n",
            arg=n,
        )
        if banner.is_visible():
            break
        expect(budget).not_to_have_text(re.compile(r"^150 of"))  # the cost shows
    else:
        raise AssertionError("the budget never ran out")
    expect(banner).to_contain_text(
        re.compile(r"token budget is used up\. It refills enough in \d+ s")
    )
    shot(page, "11-budget-spent")
    expect(banner).to_be_hidden(timeout=30_000)  # retried by itself once it refilled
    expect(answer(page)).to_have_attribute("data-status", "completed")
    stored = api.messages(chat_id_of(page))
    # every question once: the refused one was sent again by the retry, not stored twice
    sent = [f"question {i}" for i in range(n + 1)]
    assert [m["content"] for m in stored if m["role"] == "user"] == sent
    assert sum(m["role"] == "assistant" for m in stored) == len(sent)
