"""A slow or failing classifier follows its fail mode, on both run stacks, against real
misbehaving servers (``tests.safety.moderation_server``): one that answers after 3 s (past a
0.3 s timeout), one that answers 500, one that answers nonsense. Fail closed: a prompt is
refused with 503 ``moderation_unavailable`` (nothing stored, nothing run), an answer is
stopped ``rejected``; fail open: both go through. Every failure is counted on /metrics."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.helpers import assert_error
from tests.safety.conftest import Misbehaving
from tests.sse import collect, text_of

pytestmark = pytest.mark.slow

TIMEOUT = 0.3


@pytest.fixture
def run_overrides(
    request: pytest.FixtureRequest, misbehaving: dict[str, Misbehaving]
) -> dict[str, Any]:
    mode, fail_mode, stage = request.param
    kind = "endpoint" if mode != "garbage" else "guard"
    classifier: dict[str, Any] = {
        "kind": kind,
        "base_url": misbehaving[mode].url,
        "timeout_seconds": TIMEOUT,
        "fail_mode": fail_mode,
    }
    if kind == "guard":
        classifier["model"] = "guard"
    return {
        "safety": {"classifiers": {"mod": classifier}, "window_tokens": 4},
        "tiers": {
            "free": {
                "priority": 0,
                "tokens_per_minute": 1_000_000,
                "burst_tokens": 1_000_000,
                "max_concurrent_runs": 100,
                "max_output_tokens": 200,
                "moderation": {"input": [], "output": [], stage: ["mod"]},
            }
        },
    }


async def metric(client: httpx.AsyncClient, verdict: str, stage: str) -> float:
    text = (await client.get("/metrics")).text
    pattern = (
        r"parley_moderation_verdicts_total\{category=\"\",classifier=\"mod\","
        rf"stage=\"{stage}\",verdict=\"{verdict}\"\}} (\S+)"
    )
    found = re.search(pattern, text)
    return float(found[1]) if found else 0.0


async def send(client: httpx.AsyncClient, auth: dict[str, str], content: str) -> httpx.Response:
    chat_id = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
    return await client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": content},
        headers={**auth, "Accept": "application/json"},
    )


@pytest.mark.parametrize(
    ("run_overrides", "verdict"),
    [
        (("slow", "closed", "input"), "timeout"),
        (("error500", "closed", "input"), "error"),
        (("garbage", "closed", "input"), "error"),
    ],
    indirect=["run_overrides"],
)
async def test_a_failing_classifier_that_fails_closed_refuses_the_prompt_with_503(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services, verdict: str
) -> None:
    r = await send(run_client, auth, "a harmless question")
    error = assert_error(r, 503, "moderation_unavailable")
    assert "could not be checked" in error["message"]
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert chats[0]["message_count"] == 0  # nothing stored
    engine = run_services.engine
    assert isinstance(engine, FakeEngine) and engine.started == 0
    # the slow server's 3 s were not waited for: the check ended at its 0.3 s timeout
    assert await metric(run_client, verdict, "input") == 1


@pytest.mark.parametrize(
    ("run_overrides", "verdict"),
    [(("slow", "open", "input"), "timeout"), (("error500", "open", "input"), "error")],
    indirect=["run_overrides"],
)
async def test_a_failing_classifier_that_fails_open_lets_the_prompt_through(
    run_client: httpx.AsyncClient, auth: dict[str, str], verdict: str
) -> None:
    r = await send(run_client, auth, "a harmless question")
    assert r.status_code == 202, r.text
    assert await metric(run_client, verdict, "input") == 1


async def stream_answer(client: httpx.AsyncClient, auth: dict[str, str], content: str) -> list[Any]:
    chat_id = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": content}, headers=auth
    ) as r:
        assert r.status_code == 200
        return await collect(r)


@pytest.mark.parametrize("run_overrides", [("error500", "closed", "output")], indirect=True)
async def test_an_answer_no_classifier_can_check_is_stopped_when_failing_closed(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    evs = await stream_answer(run_client, auth, "/echo one two three four five six")
    assert evs[-2].event == "error" and evs[-2].data["code"] == "moderation_unavailable"
    assert evs[-1].data["status"] == "rejected"
    assert text_of(evs) == ""  # not one window was approved
    assert await metric(run_client, "error", "output") == 1


@pytest.mark.parametrize("run_overrides", [("slow", "open", "output")], indirect=True)
async def test_an_answer_goes_through_a_slow_classifier_that_fails_open(
    run_client: httpx.AsyncClient, auth: dict[str, str], misbehaving: dict[str, Misbehaving]
) -> None:
    asked = misbehaving["slow"].count()
    evs = await stream_answer(run_client, auth, "/echo one two three four five six")
    assert evs[-1].data["status"] == "completed"
    assert text_of(evs) == "one two three four five six"
    assert misbehaving["slow"].count() - asked == 2  # a window of 4, then the rest of 2
    assert await metric(run_client, "timeout", "output") == 2
