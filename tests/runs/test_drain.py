"""An api process told to stop (SIGTERM: ``Relay.drain``), in process on both run stacks:
an ``/api`` stream ends after its next batch with the reconnect hint and resumes exactly; a
quiet one hears it at its next keep-alive; a ``/v1`` stream, which its client cannot
resume, goes on to its end. (The real signal, through two api processes:
tests/faults/test_kills.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from parley.engines.fake import FAKE_MODEL
from parley.services import Services
from tests.helpers import new_api_key
from tests.runs.helpers import new_chat
from tests.sse import Event, events, text_of


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    # paced, so that the answer is still coming when the relay is told to drain
    return {"fake_engine": {"inter_token_latency_ms": 30, "output_tokens": 40}}


async def _drained(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    services: Services,
    when: Callable[[list[Event]], bool],
) -> list[Event]:
    """Send a message and read its stream, draining the relay once ``when`` the events so
    far say so; every event the stream gave."""
    chat_id = await new_chat(client, auth)
    seen: list[Event] = []
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers=auth
    ) as r:
        async for ev in events(r):
            seen.append(ev)
            if when(seen):
                services.relay.drain()
    return seen


def _hint(ev: Event) -> None:
    assert ev.event == "error" and ev.id is None, ev
    assert ev.data["code"] == "server_restarting" and ev.data["retry_after"] == 1


async def test_a_drained_stream_is_told_to_resume_and_resumes_exactly(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    def third_delta(seen: list[Event]) -> bool:
        return seen[-1].event == "delta" and sum(e.event == "delta" for e in seen) == 3

    seen = await _drained(run_client, auth, run_services, third_delta)
    _hint(seen[-1])  # the body ended after it
    assert sum(e.event == "delta" for e in seen) < 40

    # this process goes on answering (its drain only ends streams): resume from the last id
    kept = seen[:-1]
    resume = {**auth, "Last-Event-ID": str(kept[-1].id)}
    run_services.relay._draining = False  # as another api process would, not draining
    async with run_client.stream(
        "GET", f"/api/runs/{kept[0].data['run_id']}/events", headers=resume
    ) as r:
        rest = [ev async for ev in events(r)]
    everything = kept + rest
    assert len({e.id for e in everything}) == len(everything)
    assert everything[-1].event == "done" and everything[-1].data["status"] == "completed"
    assert sum(e.event == "delta" for e in everything) == 40
    assert len(text_of(everything).split()) == 40


@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"time_to_first_token_ms": 60_000}, "ping_interval_seconds": 0.3}],
    ids=["quiet"],
)
async def test_a_quiet_stream_hears_the_hint_at_its_next_keep_alive(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    # queued, running: then nothing but pings for a minute
    seen = await _drained(run_client, auth, run_services, lambda seen: len(seen) == 2)
    assert [e.event for e in seen[:-1]] == ["status", "status"]
    _hint(seen[-1])


async def test_a_v1_stream_is_not_cut_by_the_drain(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    key = await new_api_key(run_client, "prog@example.com")
    oai = openai.AsyncOpenAI(
        base_url=f"{str(run_client.base_url).rstrip('/')}/v1",
        api_key=key,
        max_retries=0,
        timeout=30,
    )
    stream = await oai.chat.completions.create(
        model=FAKE_MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text, chunks, finish = "", 0, None
    async for chunk in stream:
        chunks += 1
        if chunks == 3:
            run_services.relay.drain()
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "length" or finish == "stop"
    assert len(text.split()) == 40
