"""The moderation metrics on ``/metrics``, on both run stacks: every check counted by
classifier, stage, verdict and blocked category, with its latency; an answer's rule-set
scans counted once per answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import user_headers
from tests.observability.test_metrics import scrape, total
from tests.sse import collect

RULES = {
    "kind": "rules",
    "categories": {
        "violence": {"patterns": [r"\bforbidden\b"], "stages": ["input"]},
        "secrets": {"patterns": [r"\bhunter2\b"], "stages": ["output"]},
    },
}
VERDICTS = "parley_moderation_verdicts_total"
SECONDS = "parley_moderation_check_seconds_count"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"safety": {"classifiers": {"rules": RULES}}}


async def answer(client: httpx.AsyncClient, auth: dict[str, str], content: str) -> int:
    chat_id = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": content}, headers=auth
    ) as r:
        if r.status_code != 200:
            return r.status_code
        assert (await collect(r))[-1].event == "done"
        return 200


async def test_verdicts_and_latency_by_classifier_stage_and_category(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    assert await answer(run_client, auth, "hello there") == 200
    assert await answer(run_client, auth, "the forbidden word") == 400
    assert await answer(run_client, auth, "/echo my password is hunter2 so") == 200
    seen = await scrape(run_client)

    def verdicts(stage: str, verdict: str, category: str = "") -> float:
        return total(
            seen, VERDICTS, classifier="rules", stage=stage, verdict=verdict, category=category
        )

    assert verdicts("input", "allowed") == 2  # "hello there", the /echo one
    assert verdicts("input", "blocked", "violence") == 1
    assert verdicts("output", "allowed") == 1  # one answer, all its scans counted once
    assert verdicts("output", "blocked", "secrets") == 1
    assert total(seen, SECONDS, classifier="rules", stage="input") == 3
    assert total(seen, SECONDS, classifier="rules", stage="output") == 2
    runs = total(seen, "parley_runs_total", status="rejected")
    assert runs == 2  # the refused prompt and the stopped answer
