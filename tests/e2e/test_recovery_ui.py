"""A forgotten password in a real headless Chromium (issue 45), with a real SMTP server
process: "Forgot password?" → the email → the mail's link opened → a new password → signed
in, the session the user had before refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.accounts.mail_server import MailServer, body
from tests.e2e.conftest import PASSWORD, ServerFactory, shot

pytestmark = pytest.mark.slow


@pytest.fixture
def smtp(tmp_path: Path) -> Iterator[MailServer]:
    server = MailServer(tmp_path)
    server.start()
    yield server
    server.stop()


def test_forgot_password_mail_link_new_password_signed_in(
    page: Page, servers: ServerFactory, smtp: MailServer
) -> None:
    mail = {f"PARLEY_MAIL__{k.upper()}": str(v) for k, v in smtp.settings().items()}
    server = servers(**mail)
    email = server.new_email()
    signed_up = httpx.post(f"{server.url}/api/auth/signup", json={"email": email,
                           "password": PASSWORD})  # fmt: skip
    old = signed_up.json()["token"]

    page.goto(server.url)
    page.get_by_role("button", name="Forgot password?").click()
    expect(page.get_by_role("heading", name="Reset your password")).to_be_visible()
    page.get_by_label("Email").fill(email)
    page.get_by_role("button", name="Mail me a link").click()
    expect(page.locator("#auth-notice")).to_contain_text("Check your mail")

    (message,) = smtp.wait_for_sync(email, "Reset your parley password")
    link = re.search(r"http\S+/#reset=\S+", body(message))
    assert link, body(message)
    page.goto(link.group(0))
    expect(page.get_by_role("heading", name="Choose a new password")).to_be_visible()
    page.get_by_role("textbox", name="New password").fill("a brand new passphrase")
    shot(page, "reset-new-password")
    page.get_by_role("button", name="Set it and sign in").click()
    expect(page.locator("#account-email")).to_have_text(email)
    assert "#reset" not in page.url
    mine = {"Authorization": f"Bearer {old}"}
    assert httpx.get(f"{server.url}/api/me", headers=mine).status_code == 401
