"""The proof-of-work in a real headless Chromium (issue 44): after three wrong passwords
the sign-in form, given the right one, solves the server's challenge in the page (plain-JS
SHA-256 on http) and signs the owner in — slowed, never locked out; the sign-up form does
the same past the address's free sign-ups."""

from __future__ import annotations

import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ServerFactory, shot
from tests.helpers import PASSWORD

pytestmark = pytest.mark.slow

LIMITS = {
    "PARLEY_ACCOUNTS__CHALLENGE_AFTER_FAILURES": "3",
    "PARLEY_ACCOUNTS__SIGNUP_CHALLENGE_AFTER": "1",
    "PARLEY_ACCOUNTS__CHALLENGE_MAX_NUMBER": "200000",  # a few hundred ms of a browser's CPU
}


def submit(page: Page, email: str, password: str) -> None:
    page.locator("#auth-email").fill(email)
    page.locator("#auth-password").fill(password)
    page.locator("#auth-submit").click()


def test_the_owner_signs_in_through_the_challenge_and_a_sign_up_too(
    page: Page, servers: ServerFactory
) -> None:
    server = servers(**LIMITS)
    body = {"email": "ada@example.com", "password": PASSWORD}
    assert httpx.post(f"{server.url}/api/auth/signup", json=body).status_code == 201
    wrong = {**body, "password": "not the password"}
    for _ in range(3):
        assert httpx.post(f"{server.url}/api/auth/login", json=wrong).status_code == 401
    r = httpx.post(f"{server.url}/api/auth/login", json=body)
    assert r.json()["error"]["code"] == "challenge_required"

    page.goto(server.url)
    started = time.monotonic()
    submit(page, "ada@example.com", PASSWORD)
    expect(page.locator("#account-email")).to_have_text("ada@example.com")
    shot(page, "challenge-signed-in")
    print(f"signed in through the challenge in {time.monotonic() - started:.1f} s")

    page.context.clear_cookies()
    page.goto(server.url)
    page.get_by_role("button", name="Sign up").click()
    submit(page, "bob@example.com", PASSWORD)
    expect(page.locator("#account-email")).to_have_text("bob@example.com")
