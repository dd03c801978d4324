"""Attachments in a real headless Chromium (issue 21): attach files by the composer, take
one off before sending, ask about them (the fake engine echoes the prompt's last message,
files and all), see them on the sent message after a reload; a binary file is refused with
the server's reason and leaves no chip."""

from __future__ import annotations

import pytest
from playwright.sync_api import BrowserContext, FilePayload, Page, expect

from tests.attachments.pdfs import pdf_bytes
from tests.e2e.conftest import Server, ServerFactory, fake_engine, log_in, shot

pytestmark = pytest.mark.slow


def _file(name: str, media_type: str, data: bytes) -> FilePayload:
    return {"name": name, "mimeType": media_type, "buffer": data}


@pytest.fixture
def files_server(servers: ServerFactory) -> Server:
    return servers(**fake_engine(ttft_ms=0, itl_ms=5, tokens=12))


def test_attach_a_file_and_ask_about_it(
    context: BrowserContext, page: Page, files_server: Server
) -> None:
    api = log_in(context, files_server)
    page.goto(files_server.url + "/")
    expect(page.locator("#shell")).to_be_visible()

    report = pdf_bytes([["Quarterly report", "Revenue grew 12 percent"]])
    page.locator("#attach-input").set_input_files(
        [
            _file("notes.txt", "text/plain", b"The launch code is 4242."),
            _file("report.pdf", "application/pdf", report),
            _file("draft.md", "text/markdown", b"# not this one"),
        ]
    )
    chips = page.locator("#attachment-chips .file-chip")
    expect(chips).to_have_count(3)
    expect(chips.first).to_contain_text("notes.txt")
    page.get_by_role("button", name="Remove draft.md").click()
    expect(chips).to_have_count(2)
    shot(page, "attachments-waiting")

    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("/echo what is the launch code?")
    prompt.press("Enter")
    answer = page.locator("li.assistant").last
    expect(answer).to_contain_text("File: notes.txt")
    expect(answer).to_contain_text("4242")
    expect(answer).to_contain_text("grew 12 percent")
    expect(answer).not_to_contain_text("not this one")
    expect(page.locator("#attachment-chips")).to_be_hidden()
    sent = page.locator("li.user .message-files .file-chip")
    expect(sent).to_have_count(2)
    expect(answer).to_have_attribute("data-status", "completed")
    shot(page, "attachments-sent")

    page.reload()
    expect(sent).to_have_count(2)
    expect(sent.nth(1)).to_contain_text("report.pdf")
    chat_id = page.url.rsplit("/", 1)[-1]
    listed = api.get(f"/api/chats/{chat_id}/attachments")["data"]
    assert sorted(f["name"] for f in listed) == ["notes.txt", "report.pdf"]

    page.locator("#attach-input").set_input_files(
        [_file("photo.txt", "text/plain", b"\x89PNG\r\n\x1a\n\x00\x01")]
    )
    expect(page.locator("#errors")).to_contain_text("only text")
    expect(page.locator("#attachment-chips .file-chip")).to_have_count(0)
