"""The web UI under load: retries spaced by the tier's back-off guidance, and an answer a
busy service gave with the tier's downgrade model says so."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import PASSWORD, ServerFactory, log_in, shot
from tests.e2e.test_chat_ui import answer, open_app, send
from tests.fleet.servers import EngineReplica

pytestmark = pytest.mark.slow

# retryDelay(err, attempt, random) of the page's own module, for several refusals
DELAYS = """async () => {
  const { retryDelay } = await import("/static/js/banner.js");
  const exponential = { strategy: "exponential", base_seconds: 2, max_seconds: 20, jitter: true };
  const linear = { strategy: "linear", base_seconds: 3, max_seconds: 10, jitter: false };
  const run = (err, random) => [0, 1, 2, 3, 4, 5].map((n) => retryDelay(err, n, random));
  return {
    free_high: run({ retryAfter: 1, backoff: exponential }, () => 1),
    free_low: run({ retryAfter: 1, backoff: exponential }, () => 0),
    paid: run({ retryAfter: 2, backoff: linear }, () => 0.5),
    paid_told_later: run({ retryAfter: 7, backoff: linear }, () => 0.5),
    none: run({ retryAfter: null, backoff: null }, () => 0.5),
  };
}"""


def test_retries_follow_the_tiers_guidance(
    page: Page, context: BrowserContext, servers: ServerFactory
) -> None:
    """The first retry waits the server's Retry-After; then exponential with jitter (free:
    50 to 100% of base · 2^(n-1)) or linear (paid: base · n), capped, never sooner than the
    server said."""
    server = servers()
    log_in(context, server)
    open_app(page, server.url)
    delays = page.evaluate(DELAYS)
    assert delays["free_high"] == [1, 2, 4, 8, 16, 20]
    assert delays["free_low"] == [1, 1, 2, 4, 8, 10]
    assert delays["paid"] == [2, 3, 6, 9, 10, 10]
    assert delays["paid_told_later"] == [7, 7, 7, 9, 10, 10]
    assert delays["none"] == [2, 4, 8, 16, 32, 60]  # no guidance (a proxy's 503): doubling


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineReplica]:
    """The big model's server: 10 s to each first token (full while the page loads)."""
    replica = EngineReplica(tmp_path_factory.mktemp("big"), "big", time_to_first_token_ms=10000)
    yield replica
    replica.stop()


def test_an_answer_from_the_downgrade_model_says_so(
    page: Page, context: BrowserContext, servers: ServerFactory, big: EngineReplica
) -> None:
    """The big model's two slots are taken; the free tier's next run goes to the fake model."""
    free = {
        "priority": 0,
        "tokens_per_minute": 100_000,
        "burst_tokens": 100_000,
        "max_concurrent_runs": 10,
        "max_output_tokens": 200,
        "max_load": 1.0,
        "downgrade_model": "parley-fake",
    }
    models = [
        {
            "name": "big",
            "engine": "openai",
            "upstream_model": "parley-fake",
            "replicas": [{"base_url": big.url, "slots": 2}],
        },
        {"name": "parley-fake", "engine": "fake"},
    ]
    server = servers(PARLEY_TIERS=json.dumps({"free": free}), PARLEY_MODELS=json.dumps(models))
    with httpx.Client(base_url=server.url, timeout=30) as other:
        email = server.new_email()
        r = other.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
        auth = {"Authorization": f"Bearer {r.json()['token']}", "Accept": "application/json"}
        chat = other.post("/api/chats", json={}, headers=auth).json()["id"]
        for _ in range(2):  # the big model's load is 1.0: full for the free tier
            sent = other.post(
                f"/api/chats/{chat}/messages", json={"content": "hi", "model": "big"}, headers=auth
            )
            assert sent.status_code == 202 and sent.json()["model"] == "big", sent.text
    log_in(context, server)
    open_app(page, server.url)
    expect(page.locator("#model")).to_have_value("big")
    send(page, "hello, big model")
    message = answer(page)
    expect(message.locator(".message-downgrade")).to_have_text(
        "Answered by parley-fake: big is busy right now."
    )
    expect(message).to_have_attribute("data-status", "completed")
    shot(page, "12-downgraded-answer")
    page.reload()  # the stored answer still says so
    expect(answer(page).locator(".message-downgrade")).to_have_text(
        "Answered by parley-fake: big is busy right now."
    )
