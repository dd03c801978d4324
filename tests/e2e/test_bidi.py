"""Bidi controls in user and model text (U+202E RIGHT-TO-LEFT OVERRIDE) are kept but
isolated: they reorder only the text they are in, never the page around it."""

from __future__ import annotations

import pytest
from playwright.sync_api import BrowserContext, Dialog, Locator, Page, expect

from tests.e2e.conftest import Server, log_in

pytestmark = pytest.mark.slow

RLO = "\u202e"
FSI, PDI = "\u2068", "\u2069"

# The left edge of the first occurrence of a word in an element's text, in CSS pixels.
LEFT_OF = """(el, word) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(word);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + word.length);
    return range.getBoundingClientRect().left;
  }
  return null;
}"""


def left_of(el: Locator, word: str) -> float:
    left = el.evaluate(LEFT_OF, word)
    assert left is not None, word
    return float(left)


def assert_isolated(el: Locator) -> None:
    assert el.get_attribute("dir") == "auto"
    assert el.evaluate("e => getComputedStyle(e).unicodeBidi") == "isolate"


def test_an_override_in_a_message_and_a_title_stays_inside_them(
    page: Page, context: BrowserContext, server: Server
) -> None:
    api = log_in(context, server)
    title = f"report {RLO}fdp.exe"
    chat = api.post("/api/chats", {"title": title})
    run = api.send(chat["id"], f"/echo plain **bold {RLO}flip** after")
    assert api.wait_run(run["run_id"])["status"] == "completed"

    page.goto(f"{server.url}/c/{chat['id']}")
    answer = page.locator("li.assistant .content").last
    expect(answer).to_contain_text("after")
    question = page.locator("li.user .content").last
    heading = page.locator("#chat-title")
    link = page.locator(f'.chat-item[data-chat-id="{chat["id"]}"] .chat-link')
    for el in (question, answer, heading, link):
        assert_isolated(el)
    expect(heading).to_have_text(title)  # the text is kept as written
    expect(link).to_have_text(title)

    # the override inside **bold** reorders its own word only: the words after it keep
    # their order (without isolation, "flip after" would be laid out right to left)
    assert left_of(answer, "plain") < left_of(answer, "bold") < left_of(answer, "flip")
    assert left_of(answer, "flip") < left_of(answer, "after")
    strong = answer.locator("strong")
    assert strong.evaluate("e => getComputedStyle(e).unicodeBidi") == "isolate"

    # shown inside other words, the title is isolated with FSI … PDI: the tab's title, and
    # the question before deleting the chat (labels for screen readers are read in logical
    # order, and left as they are)
    assert page.title() == f"{FSI}{title}{PDI} · parley"
    questions: list[str] = []

    def answer_no(dialog: Dialog) -> None:
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", answer_no)
    link.locator("xpath=..").get_by_role("button", name="Delete").click()
    expect(link).to_be_visible()  # not deleted: the question was dismissed
    assert questions == [f"Delete “{FSI}{title}{PDI}” and all its messages?"]
