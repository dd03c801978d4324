"""The account page in a real headless Chromium (issue 44): the sessions with their device
and address, a key made with one scope (its secret shown once; it reads and cannot write),
the password changed (the other session ends), the key revoked."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import PASSWORD, Server, log_in, shot

pytestmark = pytest.mark.slow


def test_the_account_page_manages_sessions_keys_and_the_password(
    context: BrowserContext, page: Page, server: Server
) -> None:
    email = server.new_email()
    log_in(context, server, email)
    other = httpx.post(
        f"{server.url}/api/auth/login",
        json={"email": email, "password": PASSWORD},
        headers={"User-Agent": "nightly-script/2"},
    ).json()["token"]
    page.goto(server.url)
    page.get_by_role("link", name="Account").click()
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#sessions")).to_contain_text("nightly-script/2")
    expect(page.locator("#sessions")).to_contain_text("127.0.0.1")

    page.get_by_label("Name").fill("reader")
    for scope in ("write chats", "use the OpenAI API (/v1)", "list models"):
        page.get_by_label(scope).uncheck()
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("#key-secret code")
    expect(secret).to_be_visible()
    assert secret.inner_text().startswith("pk_")
    key = {"Authorization": f"Bearer {secret.inner_text()}"}
    assert httpx.get(f"{server.url}/api/chats", headers=key).status_code == 200
    assert httpx.post(f"{server.url}/api/chats", json={}, headers=key).status_code == 403
    expect(page.locator("#keys tbody tr")).to_have_count(1)
    expect(page.locator("#keys")).to_contain_text("chats:read")

    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password").fill(PASSWORD + " again")
    page.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-status")).to_contain_text("1 other session(s) ended")
    expect(rows).to_have_count(1)
    gone = httpx.get(f"{server.url}/api/me", headers={"Authorization": f"Bearer {other}"})
    assert gone.status_code == 401
    shot(page, "account-page")
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("#keys tbody tr")).to_have_count(0)
    assert httpx.get(f"{server.url}/api/chats", headers=key).status_code == 401


def background(page: Page) -> str:
    return str(page.evaluate("getComputedStyle(document.documentElement).backgroundColor"))


def test_the_theme_chosen_on_the_account_page_follows_the_user_to_another_browser(
    context: BrowserContext, page: Page, server: Server
) -> None:
    email = server.new_email()
    api = log_in(context, server, email)
    page.emulate_media(color_scheme="light")
    page.goto(f"{server.url}/account")
    light = background(page)
    page.get_by_label("Theme").select_option("dark")
    expect(page.locator("#theme-status")).to_have_text("Saved for every device.")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    assert background(page) != light
    shot(page, "account-dark")
    assert api.get("/api/me")["user"]["theme"] == "dark"

    fresh = context.browser.new_context()  # type: ignore[union-attr]  # no local memory of it
    r = fresh.request.post(
        f"{server.url}/api/auth/login", data={"email": email, "password": PASSWORD}
    )
    assert r.status == 200, r.text()
    other = fresh.new_page()
    other.emulate_media(color_scheme="light")
    other.goto(server.url)
    expect(other.locator("html")).to_have_attribute("data-theme", "dark")
    assert background(other) != light
    fresh.close()
