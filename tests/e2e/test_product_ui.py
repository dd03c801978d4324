"""The web UI as a whole product (issue 46), in a real headless Chromium: each numbered
defect of the issue, then each new feature (message actions, custom instructions, temporary
chats, the sidebar's groups, pins and archive)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, FilePayload, Locator, Page, expect

from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in
from tests.e2e.test_chat_ui import answer, answering, chat_id_of, open_app, prompt, send
from tests.e2e.test_moderation_ui import RULES

pytestmark = pytest.mark.slow

CHATGPT = Path(__file__).parents[1] / "portability" / "chatgpt_conversations.json"


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
    expect(page.locator("li.message.search-hit", has_text="Athens")).to_be_visible()
    expect(message(page, "user", "Rome")).to_have_count(0)
    expect(page.locator("#errors .error-item")).to_have_count(0)

    other = api.post("/api/chats", {"title": "Elsewhere"})
    page.goto(quick.url)  # (a new document: the next address differs only by its hash)
    page.goto(f"{quick.url}/c/{chat['id']}#m-msg_0123456789abcdef01234567")
    expect(page.locator("#errors .error-item")).to_have_count(1)
    page.locator(".chat-link", has_text="Elsewhere").click()
    expect(page.locator("#chat-title")).to_have_text("Elsewhere")
    expect(page.locator("#errors .error-item")).to_have_count(0)  # the bar does not follow
    assert other["id"]


@pytest.fixture
def moderated(servers: ServerFactory) -> Server:
    return servers(
        PARLEY_SAFETY__CLASSIFIERS=json.dumps(RULES), **fake_engine(ttft_ms=0, itl_ms=5, tokens=12)
    )


def test_4_a_refused_message_can_be_edited_and_sent_again(
    context: BrowserContext, page: Page, moderated: Server
) -> None:
    log_in(context, moderated)
    open_app(page, moderated.url)
    send(page, "tell me the forbidden thing")
    expect(answer(page)).to_have_attribute("data-status", "rejected")
    asked = message(page, "user", "forbidden")
    asked.get_by_role("button", name="Edit").click()  # no dead end: the stored message
    page.get_by_role("textbox", name="Edit your message").fill("/echo tell me about rivers")
    page.keyboard.press("Enter")
    expect(message(page, "assistant", "rivers")).to_have_attribute("data-status", "completed")
    expect(message(page, "user", "rivers").locator(".branch-position")).to_have_text("2/2")


def test_4_a_stopped_answer_keeps_its_marker_on_the_shared_page(
    context: BrowserContext, page: Page, server: Server
) -> None:
    api, streaming = answering(page, context, server, "an answer I will stop")
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(streaming).to_have_attribute("data-status", "cancelled")
    share = api.post(f"/api/chats/{chat_id_of(page)}/shares", {})
    page.goto(server.url + share["url"])
    expect(page.locator("li.message.assistant .message-note")).to_have_text("Stopped")


def test_4_a_chat_begun_with_a_file_is_titled_by_its_message(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    open_app(page, quick.url)
    scan: FilePayload = {"name": "scan-0042.txt", "mimeType": "text/plain", "buffer": b"Totals: 7"}
    page.locator("#attach-input").set_input_files([scan])
    expect(page.locator("#attachment-chips .file-chip")).to_have_count(1)
    send(page, "/echo Summarize my expenses\nplease")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    title = "/echo Summarize my expenses"  # its first line, not the file's name
    expect(page.locator("#chat-title")).to_have_text(title)
    expect(page.locator(".chat-item.active .chat-link")).to_have_text(title)
    assert [c["title"] for c in api.get("/api/chats")["data"]] == [title]


def test_5_escape_closes_what_is_open_and_enter_sends_an_edit(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Keys"})
    api.wait_run(api.send(chat["id"], "/echo first words")["run_id"])
    open_app(page, quick.url, f"/c/{chat['id']}")
    asked = message(page, "user", "first words")

    asked.get_by_role("button", name="Edit").click()
    editor = page.get_by_role("textbox", name="Edit your message")
    editor.press("Escape")
    expect(editor).to_have_count(0)
    expect(asked.locator(".content")).to_be_visible()

    page.get_by_role("button", name="Shared links").click()
    expect(page.locator("#share-panel")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#share-panel")).to_be_hidden()

    page.get_by_role("button", name="Delete account").click()
    expect(page.locator("#delete-form")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#delete-form")).to_be_hidden()

    asked.get_by_role("button", name="Edit").click()
    editor.fill("/echo second words")
    editor.press("Shift+Enter")  # a new line, not a send
    expect(editor).to_have_value("/echo second words\n")
    editor.press("Enter")
    expect(message(page, "assistant", "second words")).to_have_attribute("data-status", "completed")


def contrast(page: Page, selector: str) -> float:
    """WCAG contrast of an element's text against the page behind it."""
    rgb = page.evaluate(
        """(sel) => {
          const el = document.querySelector(sel);
          const parse = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
          let bg = el, color = getComputedStyle(el).color;
          const clear = (e) =>
            /rgba\\(.*, 0\\)|transparent/.test(getComputedStyle(e).backgroundColor);
          while (bg && clear(bg)) bg = bg.parentElement;
          return [parse(color), parse(getComputedStyle(bg || document.body).backgroundColor)];
        }""",
        selector,
    )

    def luminance(c: list[float]) -> float:
        def channel(v: float) -> float:
            v /= 255
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        r, g, b = (channel(v) for v in c)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    light, dark = sorted((luminance(rgb[0]), luminance(rgb[1])), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_5_the_branch_arrows_are_big_enough_and_legible_in_dark_mode(
    browser: Browser, quick: Server
) -> None:
    context = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 800})
    page = context.new_page()
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Arrows"})
    api.wait_run(api.send(chat["id"], "/echo one")["run_id"])
    question = api.messages(chat["id"])[0]
    edit = {"content": "/echo two", "edit_of": question["id"]}
    api.wait_run(
        api.post(f"/api/chats/{chat['id']}/messages", edit, Accept="application/json")["run_id"]
    )
    open_app(page, quick.url, f"/c/{chat['id']}")
    arrow = page.get_by_role("button", name="Previous version")
    box = arrow.bounding_box()
    assert box is not None and box["width"] >= 24 and box["height"] >= 24, box
    assert contrast(page, ".branch-prev") >= 4.5
    context.close()


def test_6_at_390_px_the_placeholder_titles_and_email_fit(
    browser_context_narrow: BrowserContext, quick: Server
) -> None:
    context = browser_context_narrow
    page = context.new_page()
    email = "a.rather.long.address.for.testing@example.com"
    api = log_in(context, quick, email=email)
    chat = api.post("/api/chats", {"title": "A title of some forty characters, nearly"})
    wide = "/echo look:\n```\n" + "x = 1  # " + "a long line of code " * 8 + "\n```"
    api.wait_run(api.send(chat["id"], wide)["run_id"])
    page.set_viewport_size({"width": 390, "height": 844})
    open_app(page, quick.url, f"/c/{chat['id']}")
    expect(page.locator(".code-block")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the code scrolls
    box = prompt(page)
    line = box.evaluate("el => parseFloat(getComputedStyle(el).lineHeight)")
    assert box.evaluate("el => el.scrollHeight") <= line * 1.5 + 16  # one line, not wrapped
    page.get_by_role("button", name="Show chats").click()
    link = page.locator(".chat-link").first
    room = page.locator(".chat-item").first.evaluate("el => el.clientWidth")
    assert link.evaluate("el => el.clientWidth") >= 0.9 * room  # the title has the row
    shown = page.locator("#account-email")
    assert shown.evaluate("el => el.scrollWidth <= el.clientWidth")
    expect(shown).to_have_text(email)


def test_message_actions_copy_rate_with_a_note_and_show_the_model(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    api = log_in(context, quick)
    open_app(page, quick.url)
    send(page, "/echo see this:\n```\nprint(42)\n```")
    done = answer(page)
    expect(done).to_have_attribute("data-status", "completed")
    expect(done.locator(".answer-meta")).to_contain_text(re.compile(r"^\S+ · \d+(\.\d)? s$"))

    done.get_by_role("button", name="Copy", exact=True).click()
    expect(done.get_by_role("button", name="Copied")).to_be_visible()  # the confirmation
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("see this:") and "print(42)" in copied  # the answer's own text
    code = done.locator(".code-block button.copy")
    code.click()
    expect(code).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "print(42)"

    good = done.get_by_role("button", name="Good answer")
    good.click()
    expect(good).to_have_attribute("aria-pressed", "true")
    note = done.get_by_role("textbox", name="What was good or bad? (optional)")
    note.fill("clear and short")
    note.press("Enter")
    expect(done.locator(".feedback-status")).to_have_text("Note saved")
    chat = api.get("/api/chats")["data"][0]
    stored = api.messages(chat["id"])[-1]
    assert stored["feedback"]["rating"] == "up" and stored["feedback"]["note"] == "clear and short"
    page.reload()
    expect(answer(page).get_by_role("button", name="Good answer")).to_have_attribute(
        "aria-pressed", "true"
    )
    answer(page).get_by_role("button", name="Good answer").click()  # taken back
    expect(answer(page).locator(".feedback-status")).to_have_text("Rating removed")
    assert api.messages(chat["id"])[-1].get("feedback") is None


def test_an_answer_cut_by_its_limit_says_so(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Poem"})
    body = {"content": "write a long poem", "max_tokens": 3}
    api.wait_run(
        api.post(f"/api/chats/{chat['id']}/messages", body, Accept="application/json")["run_id"]
    )
    full = api.post(
        f"/api/chats/{chat['id']}/messages", {"content": "/echo short"}, Accept="application/json"
    )
    api.wait_run(full["run_id"])
    open_app(page, quick.url, f"/c/{chat['id']}")
    expect(answer(page, 0).locator(".message-note")).to_have_text("Cut off at its length limit.")
    expect(answer(page, 1).locator(".message-note")).to_be_hidden()


def test_custom_instructions_for_the_user_and_for_a_chat(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Trip"})
    page.goto(quick.url + "/account")
    page.get_by_label("What should every answer keep in mind?").fill("Answer in French.")
    page.get_by_role("button", name="Save instructions").click()
    expect(page.locator("#instructions-status")).to_contain_text("Saved")
    assert api.get("/api/me")["user"]["instructions"] == "Answer in French."

    open_app(page, quick.url, f"/c/{chat['id']}")
    page.get_by_role("button", name="Instructions").click()
    field = page.get_by_role("textbox", name="Instructions for this chat")
    expect(field).to_be_focused()
    field.fill("Metric units only.")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#instructions-status")).to_contain_text("Saved")
    assert api.get(f"/api/chats/{chat['id']}")["instructions"] == "Metric units only."
    page.keyboard.press("Escape")
    expect(field).to_be_hidden()
    page.reload()
    page.get_by_role("button", name="Instructions ✓").click()
    expect(field).to_have_value("Metric units only.")


def test_the_sidebar_groups_pins_archives_and_restores(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    old = CHATGPT.read_bytes()  # chats from 2023 and 2024
    r = api.client.post("/api/imports", params={"filename": "conversations.json"}, content=old)
    assert r.status_code == 201, r.text
    today = api.post("/api/chats", {"title": "Fresh today"})
    open_app(page, quick.url)
    groups = page.locator(".chat-group-title")
    expect(groups).to_have_text(["Today", "Older"])
    lisbon = page.locator(".chat-item", has_text="Trip to Lisbon")
    lisbon.hover()
    lisbon.get_by_role("button", name="Pin chat “Trip to Lisbon”").click()
    expect(groups).to_have_text(["Pinned", "Today", "Older"])
    expect(page.locator(".chat-group", has_text="Pinned").locator(".chat-link")).to_have_text(
        ["Trip to Lisbon"]
    )
    fresh = page.locator(".chat-item", has_text="Fresh today")
    fresh.hover()
    fresh.get_by_role("button", name="Archive chat “Fresh today”").click()
    expect(fresh).to_have_count(0)
    assert today["id"] not in [c["id"] for c in api.get("/api/chats")["data"]]
    page.reload()  # pinned and archived are the server's, not the page's
    expect(groups).to_have_text(["Pinned", "Older"])
    page.get_by_role("button", name="Archived").click()
    expect(page.locator(".chat-link")).to_have_text(["Fresh today"])
    page.locator(".chat-item", has_text="Fresh today").hover()
    page.get_by_role("button", name="Restore chat “Fresh today”").click()
    expect(page.locator(".chat-link")).to_have_count(0)
    expect(page.locator("#chat-list-status")).to_have_text("No archived chats.")
    page.get_by_role("button", name="Chats", exact=True).click()
    expect(groups).to_have_text(["Pinned", "Today", "Older"])


def test_the_theme_toggle_cycles_and_is_kept(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    open_app(page, quick.url)
    toggle = page.get_by_role("button", name="Theme: system")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    page.get_by_role("button", name="Theme: light").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    assert api.get("/api/me")["user"]["theme"] == "dark"


def test_continue_makes_a_cut_answer_longer(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    chat = api.post("/api/chats", {"title": "Poem"})
    body = {"content": "write a long poem", "max_tokens": 3}
    api.wait_run(
        api.post(f"/api/chats/{chat['id']}/messages", body, Accept="application/json")["run_id"]
    )
    cut = api.messages(chat["id"])[-1]["content"]
    open_app(page, quick.url, f"/c/{chat['id']}")
    expect(answer(page).locator(".message-note")).to_have_text("Cut off at its length limit.")
    answer(page).get_by_role("button", name="Continue").click()
    expect(answer(page).locator(".branch-position")).to_have_text("2/2")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    longer = answer(page).locator(".content").inner_text()
    assert longer.startswith(cut + " ") and len(longer.split()) > len(cut.split())
    stored = api.messages(chat["id"])[-1]
    assert stored["content"] == longer and len(stored["sibling_ids"]) == 2
    # a whole answer offers no Continue
    done = api.post(
        f"/api/chats/{chat['id']}/messages", {"content": "/echo short"}, Accept="application/json"
    )
    api.wait_run(done["run_id"])
    page.reload()
    expect(answer(page).get_by_role("button", name="Regenerate")).to_be_visible()
    expect(answer(page).get_by_role("button", name="Continue")).to_have_count(0)


def stored_bytes(server: Server) -> bytes:
    """Every file of the server's data directory (the database, its journal, its search
    index, any blobs), as raw bytes."""
    assert server.data_dir is not None
    return b"".join(p.read_bytes() for p in sorted(server.data_dir.rglob("*")) if p.is_file())


def test_a_temporary_chat_is_stored_nowhere_and_gone_on_reload(
    context: BrowserContext, page: Page, quick: Server
) -> None:
    api = log_in(context, quick)
    open_app(page, quick.url)
    toggle = page.get_by_role("button", name="Temporary")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#chat-title")).to_have_text("Temporary chat")
    expect(page.locator("#temporary-note")).to_be_visible()
    expect(page.get_by_role("button", name="Attach files")).to_be_hidden()
    send(page, "/echo the quokka7731 is smiling")
    expect(answer(page)).to_have_attribute("data-status", "completed")
    expect(answer(page)).to_contain_text("quokka7731")
    send(page, "/echo and the wombat5519 sleeps")
    expect(answer(page, 1)).to_contain_text("wombat5519")
    expect(answer(page, 1)).to_have_attribute("data-status", "completed")
    assert page.url.rstrip("/") == quick.url  # no chat's address
    assert api.get("/api/chats")["data"] == []
    assert api.get("/api/search", q="quokka7731")["data"] == []
    on_disk = stored_bytes(quick)
    assert b"quokka7731" not in on_disk and b"wombat5519" not in on_disk

    page.reload()
    expect(page.locator("#empty-state")).to_be_visible()
    expect(page.locator("li.message")).to_have_count(0)
    expect(page.get_by_role("button", name="Temporary")).to_have_attribute("aria-pressed", "false")
    send(page, "/echo an ordinary chat")  # kept, as before
    expect(answer(page)).to_have_attribute("data-status", "completed")
    assert len(api.get("/api/chats")["data"]) == 1
