"""The built-in engine within its model's context window: a prompt that fills it is refused
(``context_length_exceeded``) before any step, and an answer stops where the window ends.
Past the window the model has no positions: a step with such a sequence failed, and took
every other sequence of its batch down with it, as empty "aborted" answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from parley.engines.builtin.engine import BuiltinEngine
from parley.engines.builtin.loader import load_model
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    FinishReason,
    GenerationRequest,
)
from tests.engines.tiny import TINY_CHAT, save_tiny_chat_model

WINDOW = TINY_CHAT.max_position_embeddings  # one token a byte: a character a token here


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[BuiltinEngine]:
    e = BuiltinEngine(load_model(save_tiny_chat_model(tmp_path / "tiny")))
    await e.start()
    yield e
    await e.close()


def asking(run_id: str, text: str, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        request_id=run_id,
        model="tiny",
        messages=[ChatMessage("user", text)],
        max_tokens=max_tokens,
    )


async def answer(engine: BuiltinEngine, request: GenerationRequest) -> list[Delta]:
    return [d async for d in engine.stream(request)]


async def test_a_prompt_that_fills_the_window_is_refused_and_harms_no_other_run(
    engine: BuiltinEngine,
) -> None:
    beside = asyncio.create_task(answer(engine, asking("short", "hello", 40)))
    too_long = asking("long", "a" * WINDOW, 8)
    with pytest.raises(ContextLengthExceeded, match=f"reads at most {WINDOW} tokens") as refused:
        await answer(engine, too_long)
    assert refused.value.code == "context_length_exceeded"
    deltas = await beside
    assert deltas[-1].finish_reason is FinishReason.LENGTH  # answered in full
    assert sum(d.tokens for d in deltas) == 40


async def test_an_answer_stops_at_the_end_of_the_window(engine: BuiltinEngine) -> None:
    request = asking("near", "a" * (WINDOW - 100), 500)
    prompt = engine.count_prompt_tokens("tiny", request.messages)
    deltas = await answer(engine, request)
    assert deltas[-1].finish_reason is FinishReason.LENGTH
    assert sum(d.tokens for d in deltas) == WINDOW - prompt  # not 500: the window's room


async def test_a_long_prompt_is_encoded_without_stopping_the_event_loop(
    engine: BuiltinEngine,
) -> None:
    """3 MB of prompt (about a second to template and encode): the loop's other tasks run on
    meanwhile (a ticker ticks), where encoding on the loop stopped them all that while."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    before = ticks
    with pytest.raises(ContextLengthExceeded):  # far past the window: refused once counted
        await answer(engine, asking("huge", "word " * 600_000, 4))
    during = ticks - before
    task.cancel()
    assert during >= 5, during
