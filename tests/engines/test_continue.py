"""An answer continued by the built-in engine (issue 46): the answer so far is written as
the model's own turn begun (no end of turn after it), so a greedy answer cut at its limit
and continued is the answer that was never cut."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from parley.engines.builtin.engine import BuiltinEngine
from parley.engines.builtin.loader import load_model
from parley.engines.interface import ChatMessage, FinishReason, GenerationRequest
from parley.engines.sampling import SamplingParams
from tests.engines.tiny import save_tiny_chat_model

QUESTION = [ChatMessage("user", "Write a long line about herons.")]
# greedy, and printable ASCII only (the tiny model's ids 0-93 are bytes 33-126): its random
# bytes would not all be UTF-8, and text that is not cannot be given back as it was said
ASCII = {token: -100.0 for token in range(94, 256)}
GREEDY = SamplingParams(temperature=0, logit_bias=ASCII)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[BuiltinEngine]:
    e = BuiltinEngine(load_model(save_tiny_chat_model(tmp_path / "tiny")))
    await e.start()
    yield e
    await e.close()


async def said(
    engine: BuiltinEngine, messages: list[ChatMessage], max_tokens: int, *, cont: bool = False
) -> tuple[str, FinishReason | None]:
    request = GenerationRequest(
        request_id=f"r{len(messages)}-{max_tokens}-{cont}",
        model="tiny",
        messages=messages,
        max_tokens=max_tokens,
        sampling=GREEDY,
        continue_final=cont,
    )
    deltas = [d async for d in engine.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].finish_reason


async def test_a_cut_answer_continued_is_the_answer_never_cut(engine: BuiltinEngine) -> None:
    whole, _ = await said(engine, QUESTION, 40)
    assert whole.isascii() and whole.isprintable()
    cut, reason = await said(engine, QUESTION, 16)
    assert reason is FinishReason.LENGTH and whole.startswith(cut) and len(cut) < len(whole)
    begun = [*QUESTION, ChatMessage("assistant", cut)]
    rest, _ = await said(engine, begun, 24, cont=True)
    assert cut + rest == whole
    # written as a finished turn and a new one begun instead, the model answers afresh
    afresh, _ = await said(engine, begun, 24)
    assert cut + afresh != whole


def test_the_prompt_ends_with_the_answer_begun(engine: BuiltinEngine) -> None:
    begun = [*QUESTION, ChatMessage("assistant", "Herons stand")]
    ids = engine.prompt_ids(begun, cont=True)
    asked = engine.prompt_ids(QUESTION)
    assert ids[: len(asked)] == asked  # the question, and the answer's turn begun
    assert engine.tokenizer.decode(ids[len(asked) :]) == "Herons stand"
