"""Which turns a fold takes: one chunk when the chat keeps pace, as many as it takes when
the chat outran its folds, never the newest turn, never more than half the budget; and the
trigger capped in tokens whatever the model's window."""

from __future__ import annotations

from parley.config import Settings
from parley.context.assembly import Fixed, Limits, Turn, fold_plan
from parley.context.prompts import ChatContext
from parley.qos.prompt_counter import PromptCounter

NONE = Fixed(None, None, 0)


def limits(trigger: int, fold: int, budget: int = 8_000) -> Limits:
    return Limits(
        budget=budget,
        window=budget,
        output=0,
        tier_cap=None,
        trigger=trigger,
        fold=fold,
        snippets=3,
        snippet_tokens=256,
        snippet_chars=600,
    )


def chat(turns: int, tokens: int = 100) -> list[Turn]:
    roles = ("user", "assistant")
    return [Turn(i + 1, roles[i % 2], f"turn {i + 1}", tokens) for i in range(turns)]


def test_nothing_is_folded_below_the_trigger() -> None:
    assert fold_plan(NONE, chat(6), limits(trigger=600, fold=200)) is None


def test_a_chat_that_keeps_pace_folds_one_chunk() -> None:
    plan = fold_plan(NONE, chat(8), limits(trigger=600, fold=200))  # 800 tokens
    assert plan is not None
    assert [t.seq for t in plan.turns] == [1, 2]  # one chunk: a user turn and its answer
    assert (plan.after_seq, plan.through_seq) == (0, 2)


def test_a_chat_that_outran_its_folds_folds_back_below_the_trigger() -> None:
    history = chat(20)  # 2,000 tokens against a trigger of 600: folds fell behind
    plan = fold_plan(NONE, history, limits(trigger=600, fold=200))
    assert plan is not None
    left = sum(t.tokens for t in history) - sum(t.tokens for t in plan.turns)
    assert 600 - 200 < left <= 600  # back under the trigger, by whole chunks
    assert plan.turns[-1].role == "assistant"  # whole chunks: the window opens on a user turn


def test_a_fold_never_takes_more_than_half_the_budget() -> None:
    history = chat(60)  # 6,000 tokens, a budget of 2,000
    plan = fold_plan(NONE, history, limits(trigger=600, fold=200, budget=2_000))
    assert plan is not None
    assert sum(t.tokens for t in plan.turns) <= 1_000


def test_a_fold_never_takes_the_newest_turn() -> None:
    history = [Turn(1, "user", "one long message", 900)]
    assert fold_plan(NONE, history, limits(trigger=600, fold=200)) is None


def context_of(settings: Settings, counter: PromptCounter) -> ChatContext:
    return ChatContext(
        settings.context,
        qos=settings.qos,
        engines=settings.engines,
        attachments=settings.attachments,
        counter=counter,
    )


async def test_the_trigger_is_capped_in_tokens_and_a_fold_is_at_most_half_of_it() -> None:
    counter = PromptCounter.from_settings(Settings().engines)
    window = counter.window("fake")
    capped = context_of(Settings(context={"summary_trigger_tokens": 1_000}), counter)
    got = await capped.limits("fake", "pro", 16)
    assert (got.budget, got.trigger, got.fold) == (window - 16, 1_000, 500)
    fraction = context_of(Settings(context={"summary_trigger_tokens": None}), counter)
    got = await fraction.limits("fake", "pro", 16)
    assert got.trigger == int((window - 16) * 0.5)
    assert got.fold == int((window - 16) * 0.25)
