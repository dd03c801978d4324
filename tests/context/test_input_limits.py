"""The input budget's limits as clients meet them: a tier's ``max_input_tokens`` caps a chat
message and a program's (``/v1``) prompt alike, refused before admission with a 400 that
names the limit; within the cap, a chat's prompt keeps to it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FAKE_MODEL
from tests.helpers import bearer, signup
from tests.runs.helpers import new_chat, send_json, wait_run

CAP = 120  # the tier's max_input_tokens (the fake model counts a word a token)


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    capped = {
        "priority": 0,
        "tokens_per_minute": 100_000,
        "burst_tokens": 100_000,
        "max_concurrent_runs": 4,
        "max_output_tokens": 64,
        "max_input_tokens": CAP,
    }
    return {"default_tier": "capped", "tiers": {"capped": capped}}


@pytest.fixture
async def session(run_client: httpx.AsyncClient) -> str:
    token: str = (await signup(run_client, "cap@example.com"))["token"]
    return token


async def test_a_program_prompt_over_the_tiers_cap_is_refused(
    run_client: httpx.AsyncClient, session: str
) -> None:
    r = await run_client.post("/api/keys", json={"name": "script"}, headers=bearer(session))
    key = r.json()["key"]
    body = {
        "model": FAKE_MODEL,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": " ".join(["word"] * 200)}],
    }
    r = await run_client.post("/v1/chat/completions", json=body, headers=bearer(key))
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert f"your tier's max_input_tokens ({CAP})" in error["message"]
    body["messages"] = [{"role": "user", "content": "short and sweet"}]
    r = await run_client.post("/v1/chat/completions", json=body, headers=bearer(key))
    assert r.status_code == 200, r.text


async def test_a_chat_keeps_within_its_tiers_cap(
    run_client: httpx.AsyncClient, session: str
) -> None:
    auth = bearer(session)
    chat_id = await new_chat(run_client, auth)
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": " ".join(["word"] * (CAP + 10)), "max_tokens": 8},
        headers={**auth, "Accept": "application/json"},
    )
    assert r.status_code == 400
    assert f"your tier's max_input_tokens ({CAP})" in r.json()["error"]["message"]
    for n in range(12):  # about 40 tokens a turn: the history soon passes the cap
        sent = await send_json(run_client, auth, chat_id, f"turn {n} " + "tell me more " * 5)
        run = await wait_run(run_client, auth, sent["run_id"])
        assert run["status"] == "completed"
        assert run["prompt"]["budget_tokens"] == CAP
        assert run["prompt"]["total_tokens"] <= CAP
