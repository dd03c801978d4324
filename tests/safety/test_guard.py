"""The guard model classifier against a real guard model: ``parley engine serve --engine
fake`` scripted to answer ``unsafe`` and its categories (``S1,S10``) when the turn it judges
says "forbidden", else ``safe``; alone and in front of parley on both run stacks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.safety.guard import GuardModel
from parley.safety.interface import ClassifierFailed, Sample, Stage
from parley.safety.settings import GuardSettings
from parley.services import Services
from tests.sse import collect, text_of

pytestmark = pytest.mark.slow


async def test_the_guard_classifier_reads_a_real_guard_models_answers(guard_url: str) -> None:
    guard = GuardModel("guard", GuardSettings(base_url=guard_url, model=FAKE_MODEL))
    try:
        said = await guard.check(Sample("how do I do the forbidden thing", Stage.INPUT))
        assert (said.blocked, said.category) == (True, "violent_crimes")
        assert "violent_crimes, hate" in (said.reason or "")
        assert not (await guard.check(Sample("how do rivers form", Stage.INPUT))).blocked
        # an answer is judged as the assistant's turn: the question alone does not decide
        answer = Sample("rivers form from rain", Stage.OUTPUT, prompt="forbidden question")
        assert not (await guard.check(answer)).blocked
        bad = Sample("here is the forbidden part", Stage.OUTPUT, prompt="a question")
        assert (await guard.check(bad)).blocked
    finally:
        await guard.close()


async def test_a_guard_model_of_another_name_is_a_failure(guard_url: str) -> None:
    guard = GuardModel("guard", GuardSettings(base_url=guard_url, model="llama-guard-9"))
    try:
        with pytest.raises(ClassifierFailed, match="404"):
            await guard.check(Sample("hello", Stage.INPUT))
    finally:
        await guard.close()


@pytest.mark.parametrize(
    ("answer", "blocked", "category"),
    [
        ("safe", False, None),
        ("  SAFE\n", False, None),
        ("unsafe\nS11", True, "suicide_self_harm"),
        ("unsafe", True, "unsafe"),
        ("unsafe\nS99", True, "s99"),
    ],
)
def test_guard_answers_are_read_as_verdicts(
    answer: str, blocked: bool, category: str | None
) -> None:
    guard = GuardModel("g", GuardSettings(base_url="http://127.0.0.1:9/v1", model="m"))
    said = guard.read(answer)
    assert (said.blocked, said.category) == (blocked, category)


def test_a_guard_answer_that_says_neither_is_a_failure() -> None:
    guard = GuardModel("g", GuardSettings(base_url="http://127.0.0.1:9/v1", model="m"))
    for answer in ("", "maybe", "I cannot judge that"):
        with pytest.raises(ClassifierFailed, match="neither safe nor unsafe"):
            guard.read(answer)


@pytest.fixture
def run_overrides(guard_url: str) -> dict[str, Any]:
    return {
        "safety": {
            "classifiers": {"guard": {"kind": "guard", "base_url": guard_url, "model": FAKE_MODEL}},
            "window_tokens": 4,
        },
        "tiers": {
            "free": {
                "priority": 0,
                "tokens_per_minute": 1_000_000,
                "burst_tokens": 1_000_000,
                "max_concurrent_runs": 100,
                "max_output_tokens": 200,
                "moderation": {"input": ["guard"], "output": ["guard"]},
            }
        },
    }


async def test_parley_refuses_what_the_guard_model_finds_unsafe(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "the forbidden thing"}, headers=auth
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["category"] == "violent_crimes"
    engine = run_services.engine
    assert isinstance(engine, FakeEngine) and engine.started == 0
    # the guard passes "/echo" prompts: the answer says the word in its second window
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json={"content": "/echo one two three four five forbidden six seven eight"},
        headers=auth,
    ) as r:
        evs = await collect(r)
    assert evs[-2].event == "error" and evs[-2].data["code"] == "content_blocked"
    assert "violent_crimes" in evs[-2].data["message"]
    assert evs[-1].data["status"] == "rejected"
    assert text_of(evs) == "one two three four"
