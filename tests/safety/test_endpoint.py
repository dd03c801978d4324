"""The moderation endpoint classifier against a real ``/v1/moderations`` (``parley engine
serve``'s, answered by its rule set), alone and in front of parley on both run stacks: a
flagged prompt is refused before admission, an answer is checked window by window beside
generation and stopped within one window of the flagged one."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FakeEngine
from parley.safety.endpoint import ModerationEndpoint
from parley.safety.interface import Sample, Stage
from parley.safety.settings import EndpointSettings
from parley.services import Services
from tests.sse import collect, text_of
from tests.waiting import eventually

pytestmark = pytest.mark.slow

WINDOW = 4


async def test_the_endpoint_classifier_reads_a_real_moderation_endpoint(
    moderation_url: str,
) -> None:
    endpoint = ModerationEndpoint("mod", EndpointSettings(base_url=moderation_url))
    try:
        said = await endpoint.check(Sample("this is Forbidden", Stage.INPUT))
        assert (said.blocked, said.category) == (True, "violence")
        assert "violence" in (said.reason or "")
        assert not (await endpoint.check(Sample("rivers and hills", Stage.OUTPUT))).blocked
        only = EndpointSettings(base_url=moderation_url, categories=["hate"])
        narrow = ModerationEndpoint("narrow", only)  # flagged, but not in a category that counts
        try:
            assert not (await narrow.check(Sample("forbidden", Stage.INPUT))).blocked
        finally:
            await narrow.close()
    finally:
        await endpoint.close()


async def test_the_engine_server_answers_moderations_in_openais_shape(moderation_url: str) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{moderation_url}/moderations", json={"input": ["fine words", "a forbidden one"]}
        )
        assert r.status_code == 200
        results = r.json()["results"]
        assert [x["flagged"] for x in results] == [False, True]
        assert results[1]["categories"] == {"violence": True}
        assert results[1]["category_scores"] == {"violence": 1.0}
        r = await client.post(f"{moderation_url}/moderations", json={"input": []})
        assert r.status_code == 400 and "input" in r.json()["error"]["message"]


def overrides(url: str, *, stages: tuple[str, ...]) -> dict[str, Any]:
    moderation: dict[str, list[str]] = {"input": [], "output": []}
    moderation |= {stage: ["mod"] for stage in stages}
    return {
        "default_tier": "checked",
        "tiers": {
            "checked": {
                "priority": 0,
                "tokens_per_minute": 1_000_000,
                "burst_tokens": 1_000_000,
                "max_concurrent_runs": 100,
                "max_output_tokens": 200,
                "moderation": moderation,
            }
        },
        "safety": {
            "classifiers": {"mod": {"kind": "endpoint", "base_url": url}},
            "window_tokens": WINDOW,
        },
        "fake_engine": {"inter_token_latency_ms": 10},
    }


@pytest.fixture
def run_overrides(request: pytest.FixtureRequest, moderation_url: str) -> dict[str, Any]:
    return overrides(moderation_url, stages=getattr(request, "param", ("input", "output")))


@pytest.mark.parametrize("run_overrides", [("input",)], indirect=True)
async def test_a_prompt_the_endpoint_flags_is_refused_before_admission(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "the forbidden one"}, headers=auth
    )
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["category"]) == (
        "content_blocked",
        "violence",
    )
    engine = run_services.engine
    assert isinstance(engine, FakeEngine) and engine.started == 0
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "rivers"}, headers=auth
    ) as ok:
        assert ok.status_code == 200
        assert (await collect(ok))[-1].data["status"] == "completed"


@pytest.mark.parametrize("run_overrides", [("output",)], indirect=True)
async def test_an_answer_is_stopped_within_one_window_of_the_flagged_one(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    words = [f"w{i}" for i in range(1, 25)]
    words[9] = "forbidden"  # in the third window (tokens 9-12)
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json={"content": "/echo " + " ".join(words)},
        headers=auth,
    ) as r:
        evs = await collect(r)
    assert [e.event for e in evs][-2:] == ["error", "done"]
    assert evs[-2].data["code"] == "content_blocked"
    assert evs[-1].data["status"] == "rejected"
    assert text_of(evs) == " ".join(words[:8])  # the two windows approved, nothing after
    deltas = [e.data["text"] for e in evs if e.event == "delta"]
    assert deltas == [" ".join(words[:4]), " " + " ".join(words[4:8])]  # a window at a time
    generated = evs[-1].data["usage"]["completion_tokens"]
    assert 12 <= generated <= 12 + WINDOW  # the engine went no further than one window on
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    await eventually(lambda: _idle(engine), "the engine's slot to be free")
    # a client resuming after the first window (or replaying all) sees no more than that
    run_id, first = evs[-1].data["run_id"], next(e.id for e in evs if e.event == "delta")
    for last in (first, None):
        headers = {**auth, **({"Last-Event-ID": last} if last else {})}
        async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as r:
            again = await collect(r)
        shown = text_of(again)
        assert "forbidden" not in shown and "w12" not in shown
        assert again[-1].data["status"] == "rejected"


async def _idle(engine: FakeEngine) -> bool:
    return engine.busy_slots == 0


@pytest.mark.parametrize("run_overrides", [("output",)], indirect=True)
async def test_a_clean_answer_comes_whole_window_by_window(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    words = [f"w{i}" for i in range(1, 11)]  # two windows and a rest of two
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json={"content": "/echo " + " ".join(words)},
        headers=auth,
    ) as r:
        evs = await collect(r)
    assert evs[-1].data["status"] == "completed"
    assert text_of(evs) == " ".join(words)
    assert evs[-1].data["usage"]["completion_tokens"] == 10
