"""Output moderation: an answer that turns bad while streaming is stopped at once, ends
``rejected`` with an ``error`` event, keeps the text approved before it, and no blocked text
reaches any client (following live, resuming by Last-Event-ID, or replaying from the start).

Through HTTP on both stacks with the rule set; and the windowed layer of the remote
classifiers driven step by step (a scripted engine stream and a scripted classifier), to show
that a check runs beside generation, that nothing is released before its window is approved,
and that the engine is stopped within one window of the blocked one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from parley.config import load_settings
from parley.engines.fake import FakeEngine
from parley.engines.interface import Delta, FinishReason
from parley.runs.moderated import Moderated, OutputRefused
from parley.safety.interface import ALLOWED, Sample, Verdict
from parley.safety.moderator import Configured, Moderator, OutputPolicy
from parley.safety.settings import FailMode
from parley.services import Services
from tests.sse import Event, collect, text_of
from tests.waiting import eventually

RULES = {  # answers only: the prompts below ask for the phrase (/echo) and must pass
    "kind": "rules",
    "categories": {
        "violence": {
            "patterns": [r"\bforbidden\b", r"\bapple pie recipe\b"],
            "stages": ["output"],
            "reason": "it turned violent",
        }
    },
}
BAD_ANSWER = "/echo alpha beta gamma forbidden delta epsilon zeta eta theta iota"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "safety": {"classifiers": {"rules": RULES}},
        "fake_engine": {"inter_token_latency_ms": 20},
    }


async def stream_send(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str
) -> list[Event]:
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": content}, headers=auth
    ) as r:
        assert r.status_code == 200
        return await collect(r)


async def events_after(
    client: httpx.AsyncClient, auth: dict[str, str], run_id: str, last_id: str | None
) -> list[Event]:
    headers = {**auth, **({"Last-Event-ID": last_id} if last_id else {})}
    async with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as r:
        assert r.status_code == 200
        return await collect(r)


async def test_an_answer_that_turns_bad_is_stopped_and_no_client_sees_the_bad_text(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    evs = await stream_send(run_client, auth, chat_id, BAD_ANSWER)
    kinds = [e.event for e in evs]
    assert kinds[-2:] == ["error", "done"]
    error, done = evs[-2].data, evs[-1].data
    assert error["code"] == "content_blocked"
    assert "violence" in error["message"] and "it turned violent" in error["message"]
    assert done["status"] == "rejected"
    assert done["finish_reason"] == "content_filter"
    shown = text_of(evs)
    assert shown.strip() == "alpha beta gamma"  # the text before the blocked phrase stays
    # the engine was stopped at the piece after the phrase: its slot is free, and it made
    # no more than that (charged: what it generated)
    await eventually(lambda: _idle(engine), "the engine's slot to be free")
    assert done["usage"]["completion_tokens"] <= 5
    run_id = done["run_id"]
    ids = [e.id for e in evs if e.id]
    for last in (None, ids[0], ids[len(ids) // 2]):  # replay, and resumes from the middle
        again = await events_after(run_client, auth, run_id, last)
        assert "forbidden" not in str([e.data for e in again])
        assert again[-1].event == "done" and again[-1].data["status"] == "rejected"
    replay = await events_after(run_client, auth, run_id, None)
    assert text_of(replay) == shown
    messages = (
        await run_client.get(
            f"/api/chats/{chat_id}/messages", params={"order": "asc"}, headers=auth
        )
    ).json()["data"]
    answer = messages[-1]
    assert (answer["status"], answer["content"]) == ("rejected", shown)
    assert answer["error"]["code"] == "content_blocked"


async def _idle(engine: FakeEngine) -> bool:
    return engine.busy_slots == 0


async def test_a_clean_answer_streams_untouched(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    evs = await stream_send(run_client, auth, chat_id, "/echo alpha beta gamma delta epsilon")
    assert evs[-1].data["status"] == "completed"
    assert "error" not in [e.event for e in evs]
    assert text_of(evs) == "alpha beta gamma delta epsilon"
    assert evs[-1].data["usage"]["completion_tokens"] == 5


async def test_a_phrase_is_held_back_while_it_could_still_be_the_blocked_one(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """``apple pie`` could be the start of ``apple pie recipe``: held back (never shown)
    until the next piece decides; released when it turns out harmless, dropped when not."""
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    evs = await stream_send(run_client, auth, chat_id, "/echo alpha apple pie beta gamma")
    assert evs[-1].data["status"] == "completed"
    assert text_of(evs) == "alpha apple pie beta gamma"
    deltas = [e.data["text"] for e in evs if e.event == "delta"]
    assert "pie" not in deltas[1] and any("apple pie beta" in d for d in deltas)
    evs = await stream_send(run_client, auth, chat_id, "/echo alpha apple pie recipe now")
    assert evs[-1].data["status"] == "rejected"
    assert text_of(evs).strip() == "alpha"


# -- the remote classifiers' windows, step by step ------------------------------------------


class Scripted:
    """A classifier whose verdicts the test gives, one per check, when it chooses."""

    name = "scripted"

    def __init__(self) -> None:
        self.asked: asyncio.Queue[tuple[Sample, asyncio.Future[Verdict]]] = asyncio.Queue()

    async def check(self, sample: Sample) -> Verdict:
        verdict: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        await self.asked.put((sample, verdict))
        return await verdict

    async def close(self) -> None:
        pass


class Engine:
    """An engine stream the test feeds token by token; counts what was read from it."""

    def __init__(self) -> None:
        self.tokens: asyncio.Queue[Delta] = asyncio.Queue()
        self.read = 0
        self.aborted = False

    async def stream(self) -> AsyncIterator[Delta]:
        while True:
            delta = await self.tokens.get()
            self.read += 1
            yield delta
            if delta.finish_reason is not None:
                return

    async def abort(self) -> None:
        self.aborted = True

    def feed(self, *words: str, finish: FinishReason | None = None) -> None:
        for i, word in enumerate(words):
            last = finish is not None and i == len(words) - 1
            self.tokens.put_nowait(Delta(f" {word}", 1, finish if last else None))


WINDOW = 4


def windowed(engine: Engine, classifier: Scripted) -> tuple[Moderated, AsyncIterator[Delta]]:
    settings = load_settings(engine="fake")
    moderator = Moderator(settings.safety, settings.qos)
    policy = OutputPolicy(
        moderator, [], [Configured(classifier, FailMode.OPEN, 30.0)], WINDOW, "the question"
    )
    moderated = Moderated(policy, engine.abort)
    return moderated, moderated.stream(engine.stream())


async def released(out: list[str], stream: AsyncIterator[Delta]) -> None:
    async for delta in stream:
        out.append(delta.text)


async def test_windows_are_checked_beside_generation_and_released_once_approved() -> None:
    engine, classifier = Engine(), Scripted()
    moderated, stream = windowed(engine, classifier)
    out: list[str] = []
    reader = asyncio.create_task(released(out, stream))
    engine.feed("w1", "w2", "w3", "w4")
    sample, first = await asyncio.wait_for(classifier.asked.get(), 5)
    assert sample.text == " w1 w2 w3 w4" and sample.prompt == "the question"
    assert out == []  # nothing before its window is approved
    engine.feed("w5", "w6", "w7", "w8", "w9")
    # generation goes on while the check runs, up to one window ahead, then waits
    await eventually(lambda: _read(engine, 8), "the next window to be read")
    await asyncio.sleep(0.05)
    assert engine.read == 8 and out == []
    first.set_result(ALLOWED)
    sample, second = await asyncio.wait_for(classifier.asked.get(), 5)
    assert out == [" w1 w2 w3 w4"]
    assert sample.text == " w1 w2 w3 w4 w5 w6 w7 w8"  # with the window before it
    second.set_result(Verdict(True, "violence", "a bad window"))
    with pytest.raises(OutputRefused) as refused:
        await asyncio.wait_for(reader, 5)
    assert refused.value.code == "content_blocked"
    assert engine.aborted  # stopped at once
    assert engine.read <= 8 + WINDOW  # within one window of the blocked one
    assert refused.value.generated == engine.read
    assert out == [" w1 w2 w3 w4"]  # the blocked window never came out
    assert moderated.generated == engine.read


async def _read(engine: Engine, n: int) -> bool:
    return engine.read >= n


async def test_the_rest_is_checked_at_the_end_before_the_finish_goes_out() -> None:
    engine, classifier = Engine(), Scripted()
    _, stream = windowed(engine, classifier)
    out: list[Delta] = []

    async def read() -> None:
        async for delta in stream:
            out.append(delta)

    reader = asyncio.create_task(read())
    engine.feed("a", "b", "c", "d", "e", "f", finish=FinishReason.STOP)
    for _ in range(2):
        _, verdict = await asyncio.wait_for(classifier.asked.get(), 5)
        verdict.set_result(ALLOWED)
    await asyncio.wait_for(reader, 5)
    assert "".join(d.text for d in out) == " a b c d e f"
    assert out[-1].finish_reason is FinishReason.STOP
    assert sum(d.tokens for d in out) == 6
