"""Long chats through the public API, on both stacks, with the fake engine's small window:
every turn is answered within its budget, an early fact is still reached late, the prompt's
prefix holds from turn to turn except when the summary folds, a failing summarizer changes
nothing for the user, and nothing of another user's ever reaches a prompt."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from parley.context.relevance import bears_on, excerpt, stems
from parley.domain import BACKGROUND_PRIORITY, RunSource, RunStatus
from parley.engines.fake import FakeEngine
from parley.engines.interface import ChatMessage, Delta, EngineError, GenerationRequest
from parley.services import Services
from parley.store.schema import Chat, Run
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.waiting import eventually

WINDOW = 1024  # the fake model's context window: a chat outgrows it in about 20 turns
MAX_TOKENS = 16
FACT = "By the way, my cat is called Bartholomew and he sleeps on the piano all day."
QUESTION = "Remind me, what is my cat called?"
TOPICS = "rivers mountains bread violins trains gardens comets harbours lanterns maps".split()


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "default_tier": "pro",  # a budget of tokens large enough for hundreds of turns
        "fake_engine": {
            "context_window": WINDOW,
            "time_to_first_token_ms": 0,
            "inter_token_latency_ms": 0,
            "output_tokens": 24,
        },
    }


def message(turn: int) -> str:
    """Turn ``turn``'s user message: the fact at turn 3, the question at 150, else chatter
    of 15 to 40 words that never mentions a cat."""
    if turn == 3:
        return FACT
    if turn == 150:
        return QUESTION
    rng = random.Random(turn)
    words = [rng.choice(TOPICS) for _ in range(rng.randint(15, 40))]
    return f"Turn {turn}: tell me more about " + " ".join(words)


class Recorder:
    """Every request the engine is asked, by run id; summary folds fail if ``failing``."""

    def __init__(self, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: dict[str, GenerationRequest] = {}
        self.failing = False
        self.warm_gate: asyncio.Event | None = None  # set: warm-ups wait for it
        self._stream = engine.stream
        monkeypatch.setattr(engine, "stream", self.stream)

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        self.requests[request.request_id] = request
        if self.failing and request.priority == BACKGROUND_PRIORITY:
            return _failing()
        if self.warm_gate is not None and is_warm_up(request):
            return self._gated(request, self.warm_gate)
        return self._stream(request)

    async def _gated(self, request: GenerationRequest, gate: asyncio.Event) -> AsyncIterator[Delta]:
        await gate.wait()
        async for delta in self._stream(request):
            yield delta


def is_warm_up(request: GenerationRequest) -> bool:
    """A prefix prefilled after a fold (one token asked, at the lowest priority)."""
    return request.max_tokens == 1 and request.priority == BACKGROUND_PRIORITY


async def _failing() -> AsyncIterator[Delta]:
    raise EngineError("the summarizer is down")
    yield  # an async generator  # pragma: no cover


@pytest.fixture
async def auth(run_client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(run_client, "ada@example.com")


@pytest.fixture
def recorder(run_services: Services, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    assert isinstance(run_services.engine, FakeEngine)
    return Recorder(run_services.engine, monkeypatch)


async def turn(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str
) -> dict[str, Any]:
    sent = await send_json(client, auth, chat_id, content, max_tokens=MAX_TOKENS)
    run = await wait_run(client, auth, sent["run_id"])
    assert run["status"] == "completed", run
    parts = run["prompt"]
    assert parts is not None and parts["total_tokens"] <= parts["budget_tokens"], parts
    assert run["usage"]["prompt_tokens"] == parts["total_tokens"]
    return run


def text_of(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content for m in messages)


async def summary_runs(services: Services, chat_id: str) -> list[Run]:
    async with services.db.transaction() as s:
        found = await s.scalars(
            select(Run).where(Run.chat_id == chat_id, Run.source == RunSource.SUMMARY)
        )
        return list(found)


async def chat_row(services: Services, chat_id: str) -> Chat:
    async with services.db.transaction() as s:
        chat = await s.get(Chat, chat_id)
        assert chat is not None
        return chat


async def no_fold_under_way(run_services: Services, chat_id: str) -> None:
    """Until the chat's fold (if any) has landed or ended."""

    async def landed() -> bool:
        return (await chat_row(run_services, chat_id)).summary_run_id is None

    await eventually(landed, "the chat's fold to land")


async def test_a_200_turn_chat_is_answered_within_budget_and_remembers_turn_3(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    recorder: Recorder,
) -> None:
    chat_id = await new_chat(run_client, auth)
    budget = WINDOW - MAX_TOKENS
    previous: tuple[dict[str, Any], list[ChatMessage]] | None = None
    prefix_changes = 0
    for n in range(1, 201):
        run = await turn(run_client, auth, chat_id, message(n))
        parts = run["prompt"]
        assert parts["budget_tokens"] == budget
        sent = recorder.requests[run["id"]].messages
        if previous is not None:
            before, before_sent = previous
            held = sent[: len(before_sent) - 1] == before_sent[:-1]  # all but the new message
            folded = parts["summary_through_seq"] != before["summary_through_seq"]
            assert held or folded, f"turn {n}: the prefix changed without a fold"
            prefix_changes += not held
        if n == 150:  # through retrieval (the fake model's summaries are gibberish)
            assert FACT in text_of(sent)
            assert 5 in parts["snippet_seqs"]  # turn 3's message: seq 5
        previous = (parts, sent)
    folds = await summary_runs(run_services, chat_id)
    landed = [r for r in folds if r.status is RunStatus.COMPLETED]
    assert len(landed) >= 10  # the summary folded, in chunks …
    assert prefix_changes <= len(landed)  # … and only a fold changed the prefix
    assert all(r.reserved_tokens is None and r.priority == BACKGROUND_PRIORITY for r in folds)
    chat = await chat_row(run_services, chat_id)
    assert chat.summary and chat.summary_through_seq >= 2 * len(landed)
    shown = (await run_client.get(f"/api/chats/{chat_id}", headers=auth)).json()
    assert shown["summary_through_seq"] >= chat.summary_through_seq  # (a fold may land since)
    assert shown["summary"]


def warmed(recorder: Recorder) -> list[list[ChatMessage]]:
    """The prefixes prefilled for folds (before they landed)."""
    return [r.messages for r in recorder.requests.values() if is_warm_up(r)]


async def test_a_landed_fold_warms_the_next_turns_prefix(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    recorder: Recorder,
) -> None:
    """The next turn after a fold begins with exactly the prefix prefilled for it, so the
    engine's prefix cache holds it (a user who pauses between turns never waits for it)."""
    chat_id = await new_chat(run_client, auth)
    n = 0
    while not warmed(recorder):
        n += 1
        assert n < 60, "no fold landed and warmed its prefix"
        await turn(run_client, auth, chat_id, message(n))
        await asyncio.sleep(0.05)  # a user's pause: the fold and its warming run meanwhile
        await no_fold_under_way(run_services, chat_id)
    prefix = warmed(recorder)[-1]
    run = await turn(run_client, auth, chat_id, message(n + 1))
    sent = recorder.requests[run["id"]].messages
    assert sent[: len(prefix)] == prefix
    assert prefix[0].content.startswith("Summary of this conversation's earlier messages")


async def test_turns_keep_the_old_prefix_until_the_new_one_is_warm(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    recorder: Recorder,
) -> None:
    """A completed fold does not land while its prefix is being prefilled: a turn meanwhile
    is sent with the old prefix (in the engine's cache), and only once the warm-up ends does
    the summary land and the next turn begin with the warmed prefix."""
    recorder.warm_gate = asyncio.Event()
    chat_id = await new_chat(run_client, auth)
    n = 0
    while not warmed(recorder):
        n += 1
        assert n < 60, "no fold completed"
        before = await turn(run_client, auth, chat_id, message(n))
        if before["prompt"]["fold_due"]:  # no next turn until its fold is held at its
            # warm-up: turns sent meanwhile could outgrow the window on a slow machine
            await eventually(
                lambda: asyncio.sleep(0, warmed(recorder) or None), "the fold to complete"
            )
    chat = await chat_row(run_services, chat_id)
    assert (chat.summary, chat.summary_through_seq) == (None, 0)  # completed, not landed
    assert chat.summary_run_id is not None
    fold = [r for r in await summary_runs(run_services, chat_id) if r.id == chat.summary_run_id]
    assert fold[0].status is RunStatus.COMPLETED
    during = await turn(run_client, auth, chat_id, message(n + 1))
    sent = recorder.requests[during["id"]].messages
    before_sent = recorder.requests[before["id"]].messages
    assert sent[: len(before_sent) - 1] == before_sent[:-1]  # the old prefix, held
    assert during["prompt"]["summary_through_seq"] == 0
    recorder.warm_gate.set()
    await no_fold_under_way(run_services, chat_id)
    chat = await chat_row(run_services, chat_id)
    assert chat.summary_through_seq == fold[0].summary_through_seq and chat.summary
    after = await turn(run_client, auth, chat_id, message(n + 2))
    prefix = warmed(recorder)[-1]
    assert recorder.requests[after["id"]].messages[: len(prefix)] == prefix
    assert after["prompt"]["summary_through_seq"] == chat.summary_through_seq


async def test_a_failing_summarizer_leaves_the_chat_serving(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    recorder: Recorder,
) -> None:
    recorder.failing = True
    chat_id = await new_chat(run_client, auth)
    for n in range(1, 61):
        run = await turn(run_client, auth, chat_id, message(n) if n < 60 else QUESTION)
    parts = run["prompt"]
    assert parts["left_out_seqs"][0] == 1  # the window slid past the oldest turns …
    assert FACT in text_of(recorder.requests[run["id"]].messages)  # … retrieval reaches them
    folds = await summary_runs(run_services, chat_id)
    assert sum(r.status is RunStatus.FAILED for r in folds) >= 10  # asked again and again
    assert not any(r.status is RunStatus.COMPLETED for r in folds)
    chat = await chat_row(run_services, chat_id)
    assert (chat.summary, chat.summary_through_seq) == (None, 0)


async def test_another_users_messages_never_reach_a_prompt(
    run_client: httpx.AsyncClient,
    auth: dict[str, str],
    run_services: Services,
    recorder: Recorder,
) -> None:
    other = await user_headers(run_client, "other@example.com")
    theirs = await new_chat(run_client, other)
    await turn(run_client, other, theirs, FACT)
    mine = await new_chat(run_client, auth)
    runs = [await turn(run_client, auth, mine, message(n)) for n in (1, 2, *range(4, 40))]
    runs.append(await turn(run_client, auth, mine, QUESTION))
    last = runs[-1]["prompt"]
    assert last["summary_through_seq"] or last["left_out_seqs"]  # older turns to search
    for run in runs:
        assert "Bartholomew" not in text_of(recorder.requests[run["id"]].messages)


async def test_a_message_larger_than_the_budget_is_refused_naming_the_limit(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    words = " ".join(["word"] * WINDOW)
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": words, "max_tokens": MAX_TOKENS},
        headers={**auth, "Accept": "application/json"},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "content")
    assert f"at most {WINDOW - MAX_TOKENS}" in error["message"]
    assert f"{WINDOW}-token context window" in error["message"]
    listed = (await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()
    assert listed["data"] == []


@pytest.mark.parametrize(
    ("new", "older", "bears"),
    [
        (QUESTION, FACT, True),  # cat, called
        ("What about my cats?", "I called the cat in.", True),  # one word asked: one shared
        ("Tell me about the river Thames", "rivers of Europe are long", False),  # one of two
        ("Tell me about the river Thames", "The Thames is a river", True),
        ("the and of", FACT, False),  # nothing asked
        # a long message sharing two words by chance: under 30% of what it asks
        (message(7), "what of rivers and bread?", False),
        (message(7), message(7), True),
    ],
)
def test_a_snippet_must_bear_on_the_new_message(new: str, older: str, bears: bool) -> None:
    assert bears_on(new, older, 2, 0.3) is bears


def test_a_snippet_must_add_what_the_prompt_lacks() -> None:
    """The words in common that the prompt holds already (its verbatim turns, its summary)
    do not make a message bear on the new one: it must share enough that the prompt lacks."""
    assert bears_on(QUESTION, FACT, 2, 0.2)
    assert bears_on(QUESTION, FACT, 2, 0.2, known=frozenset(stems("the cat sat")))  # called
    assert not bears_on(QUESTION, FACT, 2, 0.2, known=frozenset(stems(QUESTION)))
    long = message(7)  # ten distinct words asked: two of them must be news to the prompt
    assert len(stems(long)) == 10
    assert bears_on(long, long, 2, 0.2)
    assert not bears_on(long, long, 2, 0.2, known=frozenset(stems(long, every=True)))
    assert bears_on(long, long, 2, 0.2, known=frozenset(sorted(stems(long))[2:]))
    assert not bears_on(long, long, 2, 0.2, known=frozenset(sorted(stems(long))[1:]))


def test_a_long_snippet_is_sent_as_its_sentences_that_bear_on_the_new_message() -> None:
    chatter = " ".join(f"The {t} were lovely on day {i}." for i, t in enumerate(TOPICS))
    older = f"{chatter} {FACT} {chatter}"
    cut = excerpt(QUESTION, older, 120)
    assert cut == FACT  # the one sentence about the cat, not the message's head
    assert excerpt(QUESTION, FACT, 120) == FACT  # short enough: whole
    both = excerpt("rivers and comets", older, 200)
    assert "rivers" in both and "comets" in both and " … " in both and len(both) <= 200
    assert excerpt("pianos", chatter, 40) == chatter[:40].rstrip() + "…"  # nothing shared
