"""The run lifecycle's stop, cancel and failure paths once more on the built-in engine (the
tiny random chat model), on both stacks: the worker handles the real engine's abort
deltas and errors, not only the fake's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.engines.builtin.engine import BuiltinEngine
from parley.services import Services
from tests.engines.tiny import save_tiny_chat_model
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import Event, events, text_of
from tests.waiting import eventually

LONG = 2000  # output tokens: long enough to act on mid-answer (the model never ends early)


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat")


@pytest.fixture
def run_overrides(tiny_chat_model: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    # ``@pytest.mark.whole_history``: context management off, every run sends it all
    whole = request.node.get_closest_marker("whole_history") is not None
    return {
        "context": {"enabled": not whole},
        "engine": "builtin",
        "default_tier": "pro",  # answers up to 4,096 tokens
        "builtin_engine": {
            "model": tiny_chat_model,
            "kv_cache_tokens": 4096,
            "block_size": 16,
            "max_running": 1,  # one run at a time: a second one waits in the queue
        },
    }


async def _stream(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str, **kw: Any
) -> AsyncIterator[tuple[Event, list[Event]]]:
    body = {"content": content, "temperature": 0, **kw}
    seen: list[Event] = []
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json=body, headers=auth
    ) as r:
        assert r.status_code == 200
        async for ev in events(r):
            seen.append(ev)
            yield ev, seen
            if ev.event == "done":
                return


async def test_an_answer_streams_and_is_stored(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    assert isinstance(run_services.engine, BuiltinEngine)
    chat_id = await new_chat(run_client, auth)
    seen = [ev async for ev, _ in _stream(run_client, auth, chat_id, "hello", max_tokens=16)]
    done = seen[-1]
    assert (done.data["status"], done.data["finish_reason"]) == ("completed", "length")
    message = await stored_message(run_client, auth, chat_id, done.data["message_id"])
    assert message["content"] == text_of(seen)
    assert done.data["usage"]["completion_tokens"] == sum(
        e.data["tokens"] for e in seen if e.event == "delta"
    )
    assert done.data["usage"]["prompt_tokens"] > 0


async def test_stop_mid_answer_keeps_the_partial_text(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    seen: list[Event] = []
    async for ev, seen in _stream(run_client, auth, chat_id, "hello", max_tokens=LONG):
        if ev.event == "delta" and sum(e.event == "delta" for e in seen) == 3:
            run_id = seen[0].data["run_id"]
            r = await run_client.post(f"/api/chats/{chat_id}/runs/{run_id}/cancel", headers=auth)
            assert r.status_code == 200
    done = seen[-1]
    assert done.data["status"] == "cancelled"
    assert done.data["finish_reason"] == "cancelled"
    assert done.data["usage"]["completion_tokens"] < LONG
    message = await stored_message(run_client, auth, chat_id, done.data["message_id"])
    assert (message["status"], message["content"]) == ("cancelled", text_of(seen))


async def test_a_queued_run_is_cancelled_before_the_engine_sees_it(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, BuiltinEngine)
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "first", max_tokens=LONG, temperature=0)

    async def first_running() -> bool:
        run = (await run_client.get(f"/api/runs/{first['run_id']}", headers=auth)).json()
        return bool(run["status"] == "running")

    await eventually(first_running, "the first run to start")
    second = await send_json(run_client, auth, chat_id, "second", max_tokens=LONG)
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{second['run_id']}/cancel", headers=auth)
    assert r.json()["status"] == "cancelled"  # ended at once: it was waiting for the slot
    await run_client.post(f"/api/chats/{chat_id}/runs/{first['run_id']}/cancel", headers=auth)
    assert (await wait_run(run_client, auth, first["run_id"]))["status"] == "cancelled"

    async def engine_idle() -> bool:  # the abort reaches the engine's thread a moment later
        return not engine.core.scheduler.has_work

    await eventually(engine_idle, "the engine to let go of both runs", timeout=10)
    message = await stored_message(run_client, auth, chat_id, second["message_id"])
    assert (message["status"], message["content"]) == ("cancelled", "")


async def test_an_abort_nobody_asked_for_fails_the_run_with_its_text(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, BuiltinEngine)
    chat_id = await new_chat(run_client, auth)
    seen: list[Event] = []
    async for ev, seen in _stream(run_client, auth, chat_id, "hello", max_tokens=LONG):
        if ev.event == "delta" and sum(e.event == "delta" for e in seen) == 3:
            await engine.abort(seen[0].data["run_id"])  # the engine stops it on its own
    assert [e.event for e in seen[-2:]] == ["error", "done"]
    assert seen[-2].data["code"] == "engine_aborted"
    done = seen[-1]
    assert (done.data["status"], done.data["finish_reason"]) == ("failed", "error")
    message = await stored_message(run_client, auth, chat_id, done.data["message_id"])
    assert (message["status"], message["content"]) == ("failed", text_of(seen))


async def test_a_message_no_prompt_can_hold_is_refused_before_admission(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """With context management on, a message larger than the run's input budget is refused
    at once (400), naming the limit; nothing is stored."""
    chat_id = await new_chat(run_client, auth)
    body = {"content": "x" * 5000, "max_tokens": 8}
    r = await run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=auth)
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "content")
    assert "4096-token context window" in error["message"]
    assert "less the 8 tokens kept for the answer" in error["message"]
    listed = (await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()
    assert listed["data"] == []


@pytest.mark.whole_history
async def test_a_prompt_the_engine_cannot_hold_fails_with_a_reason(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """Not an empty "completed" answer: the client is told the context is too long."""
    chat_id = await new_chat(run_client, auth)
    seen = [ev async for ev, _ in _stream(run_client, auth, chat_id, "x" * 5000, max_tokens=8)]
    assert [e.event for e in seen[-2:]] == ["error", "done"]
    assert seen[-2].data["code"] == "context_length_exceeded"
    assert "4096 tokens" in seen[-2].data["message"]
    done = seen[-1]
    assert done.data["status"] == "failed"
    run = (await run_client.get(f"/api/runs/{done.data['run_id']}", headers=auth)).json()
    assert run["error"]["code"] == "context_length_exceeded"
    message = await stored_message(run_client, auth, chat_id, done.data["message_id"])
    assert (message["status"], message["content"]) == ("failed", "")


async def test_the_next_turn_finds_the_chat_in_the_prefix_cache(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """The prompt's prefix holds from turn to turn, and the run says how much of it the
    engine had cached (``prompt.cached_tokens``, ``usage.prompt_tokens_details``)."""
    chat_id = await new_chat(run_client, auth)
    opening = "Tell me a story about " + "a lighthouse keeper and the sea " * 12
    first = await send_json(run_client, auth, chat_id, opening, max_tokens=8, temperature=0)
    first_run = await wait_run(run_client, auth, first["run_id"])
    second = await send_json(run_client, auth, chat_id, "and then?", max_tokens=8)
    run = await wait_run(run_client, auth, second["run_id"])
    cached = run["prompt"]["cached_tokens"]
    assert cached >= first_run["usage"]["prompt_tokens"] - 16  # all but a partial block
    assert run["usage"]["prompt_tokens_details"] == {"cached_tokens": cached}


async def test_an_answer_cut_inside_a_character_never_ends_in_a_broken_one(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    """max_tokens falls inside "🍕" (four byte tokens): the answer ends before it, streamed
    and stored, never with U+FFFD (issue 39)."""
    engine = run_services.engine
    assert isinstance(engine, BuiltinEngine)
    answer = engine.tokenizer.encode("ok 🍕")
    assert len(answer) == 7  # byte-level: o, k, space and the four bytes of the emoji
    runner = engine.core.runner
    runner.sample = lambda _, seqs: ([answer[len(s.output)] for s in seqs], {})  # type: ignore[method-assign,assignment]
    chat_id = await new_chat(run_client, auth)
    seen = [ev async for ev, _ in _stream(run_client, auth, chat_id, "hi", max_tokens=5)]
    assert seen[-1].data["finish_reason"] == "length"
    assert text_of(seen) == "ok "
    assert not any("\ufffd" in e.data.get("text", "") for e in seen if e.event == "delta")
    message = await stored_message(run_client, auth, chat_id, seen[-1].data["message_id"])
    assert message["content"] == "ok "
