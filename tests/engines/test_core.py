"""The engine core on a tiny random model: prefix cache, abort, preemption, priority."""

from __future__ import annotations

from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.sequence import SeqStatus, Sequence, SequenceSampling
from parley.engines.interface import FinishReason
from tests.engines.tiny import tiny_model


def core(num_blocks: int = 64, max_batch_tokens: int = 512, max_running: int = 64) -> EngineCore:
    return EngineCore(
        tiny_model(),
        num_blocks=num_blocks,
        block_size=4,
        max_batch_tokens=max_batch_tokens,
        max_running=max_running,
    )


def seq(name: str, prompt: list[int], max_tokens: int = 12, priority: int = 0) -> Sequence:
    return Sequence(name, list(prompt), SequenceSampling(max_tokens=max_tokens), priority=priority)


def drain(c: EngineCore) -> int:
    steps = 0
    while c.scheduler.has_work:
        c.step()
        steps += 1
        assert steps < 10_000, "the engine did not finish"
    return steps


SHARED = list(range(3, 43))  # 40 tokens: 10 full blocks of 4


def test_a_shared_prefix_is_served_from_the_cache_and_changes_nothing() -> None:
    c = core()
    first = seq("a", [*SHARED, 50, 51])
    c.add(first)
    drain(c)
    second = seq("b", [*SHARED, 60, 61, 62])
    c.add(second)
    drain(c)
    assert second.num_cached_prompt == 40  # the whole shared prefix
    assert c.blocks.hits >= 40
    cold = core()
    again = seq("b", [*SHARED, 60, 61, 62])
    cold.add(again)
    drain(cold)
    assert again.num_cached_prompt == 0
    assert second.output == again.output  # the cache changes no token


def test_abort_frees_the_blocks_at_once() -> None:
    c = core(num_blocks=32)
    s = seq("a", list(range(3, 30)), max_tokens=100)
    c.add(s)
    for _ in range(3):
        c.step()
    assert c.blocks.usage > 0
    c.abort(s)
    assert s.status is SeqStatus.FINISHED
    assert c.blocks.usage == 0
    assert not c.scheduler.has_work


def test_preemption_under_a_small_cache_keeps_outputs_and_never_deadlocks() -> None:
    prompts = [list(range(3 + i, 23 + i)) for i in range(6)]  # 20 tokens each
    roomy = core(num_blocks=200)
    expected = []
    for i, p in enumerate(prompts):
        s = seq(f"s{i}", p, max_tokens=20)
        roomy.add(s)
        expected.append(s)
    drain(roomy)
    tight = core(num_blocks=24)  # 96 slots for 6 sequences of up to 40 tokens
    got = []
    for i, p in enumerate(prompts):
        s = seq(f"s{i}", p, max_tokens=20)
        tight.add(s)
        got.append(s)
    drain(tight)
    assert sum(s.preemptions for s in got) > 0
    assert [s.output for s in got] == [s.output for s in expected]
    assert tight.blocks.usage == 0


def test_priority_decides_admission_and_preemption() -> None:
    c = core(num_blocks=16, max_running=8)  # each needs 13 blocks at the end: not both
    low = seq("low", list(range(3, 23)), max_tokens=30, priority=0)
    high = seq("high", list(range(30, 50)), max_tokens=30, priority=5)
    c.add(low)
    c.step()
    c.add(high)
    drain(c)
    assert high.preemptions == 0
    assert low.preemptions > 0
    assert len(high.output) == len(low.output) == 30


def test_a_prompt_larger_than_the_cache_ends_instead_of_blocking() -> None:
    c = core(num_blocks=4)
    big = seq("big", list(range(3, 60)))
    small = seq("small", [5, 6, 7], max_tokens=3)
    c.add(big)
    c.add(small)
    events = []
    while c.scheduler.has_work:
        events += c.step()
    ended = [e for e in events if e.seq is big]
    assert ended
    assert ended[0].finish is FinishReason.LENGTH
    assert big.output == []
    assert len(small.output) == 3


def test_batches_mix_prefill_chunks_with_decodes() -> None:
    c = core(max_batch_tokens=16)
    a = seq("a", [5, 6, 7], max_tokens=40)
    c.add(a)
    c.step()
    c.step()
    b = seq("b", list(range(3, 60)), max_tokens=5)
    c.add(b)
    c.step()
    stats = c.last_step
    assert stats is not None
    assert stats.batch_sequences == 2  # a decodes while b's prompt is chunked in
    assert stats.batch_tokens == 16
    assert len(a.output) == 3


def test_a_waiting_request_of_higher_priority_goes_before_a_long_prefill() -> None:
    """A long background prompt (a summary, a warm-up) being prefilled chunk by chunk does
    not hold a user's request out until it is done: the request is admitted and prefilled
    first, the background prompt sitting that step out, and goes on after."""
    c = core(max_batch_tokens=16)
    background = seq("background", list(range(3, 43)) * 2, max_tokens=2, priority=-1)
    c.add(background)
    c.step()  # its first chunk: a quarter of the step's 16 tokens (short background steps)
    assert background.num_computed == 4
    user = seq("user", list(range(20, 32)), max_tokens=2, priority=2)
    c.add(user)
    c.step()
    assert user.num_computed == 12  # all of its prompt, in the very next step …
    assert background.num_computed == 4  # … alone: no chunk of the background one beside it
    c.step()  # the user's decode, and the background prefill goes on beside it
    assert background.num_computed == 8
    drain(c)
    assert len(user.output) == len(background.output) == 2


def test_background_decodes_sit_out_a_users_prefill() -> None:
    """A background sequence decoding (a summary being written) takes no part in the steps
    that prefill a user's prompt: the user's first token costs its prefill alone. It decodes
    again once the user's sequence decodes."""
    c = core(max_batch_tokens=16)
    background = seq("background", [5, 6, 7], max_tokens=40, priority=-1)
    c.add(background)
    c.step()
    c.step()
    assert len(background.output) == 2
    user = seq("user", list(range(3, 43)), max_tokens=3, priority=0)  # 40 tokens: 3 chunks
    c.add(user)
    for _ in range(3):
        c.step()
        assert c.last_step is not None and c.last_step.batch_sequences == 1
    assert len(background.output) == 2  # paused while the user's prompt was prefilled
    assert len(user.output) == 1
    c.step()
    assert len(background.output) == 3  # beside the user's decode
    drain(c)
    assert len(user.output) == 3
    assert len(background.output) == 40


def test_a_user_request_that_cannot_fit_does_not_stall_the_background() -> None:
    """Background sequences are held back only for a user's request that can run now: one
    waiting for blocks they hold would otherwise wait forever."""
    c = core(num_blocks=12, max_batch_tokens=64)
    background = seq("background", list(range(3, 35)), max_tokens=8, priority=-1)  # 8 blocks
    c.add(background)
    c.step()
    user = seq("user", list(range(40, 60)), max_tokens=2)  # 5 blocks: 4 are free
    c.add(user)
    drain(c)
    assert len(background.output) == 8
    assert len(user.output) == 2


def test_a_prefill_chunk_cut_one_token_short_of_the_prompt_finishes_it_and_answers_the_same() -> (
    None
):
    """The budget can end a prompt's chunk one token short: the next step feeds that last
    token (its slot already in the table) and samples, as the uncut prompt does."""
    prompt = [5, 17, 33, 8, 9, 9, 9, 11, 12]
    want = seq("whole", prompt)
    whole = core()
    whole.add(want)
    drain(whole)
    for budget in (len(prompt) - 1, 4):  # 8 then 1 token left; 4, 4 then 1 token left
        cut = core(max_batch_tokens=budget)
        got = seq(f"cut{budget}", prompt)
        cut.add(got)
        drain(cut)
        assert got.output == want.output
        cut.blocks.check_invariants()
        assert cut.blocks.num_free_blocks == 64
