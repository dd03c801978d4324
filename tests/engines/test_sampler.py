"""The batched sampler draws from the distribution it is given, row by row."""

from __future__ import annotations

import math

import torch

from parley.engines.builtin.sampler import sample_batch
from parley.engines.builtin.sequence import SequenceSampling

WARM = SequenceSampling(max_tokens=1, temperature=1.0)


def counts(tokens: list[int], vocab: int) -> list[int]:
    return [tokens.count(i) for i in range(vocab)]


def test_draws_follow_the_softmax_of_each_row() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0], [0.0, 0.0, 0.0, 0.1, 0.9]])
    logits = probs.log()  # -inf for the impossible tokens
    n = 4_000
    rows = logits.repeat(n, 1)  # alternating rows of the two distributions
    tokens = sample_batch(rows, [WARM] * (2 * n), [None] * (2 * n))
    for r in range(2):
        seen = counts(tokens[r::2], 5)
        for p, c in zip(probs[r].tolist(), seen, strict=True):
            sd = math.sqrt(n * p * (1 - p)) or 1
            assert abs(c - n * p) < 5 * sd, (r, seen)  # 5 sigma
        assert all(c == 0 for p, c in zip(probs[r].tolist(), seen, strict=True) if p == 0)


def test_temperature_zero_rows_are_greedy_beside_sampled_rows() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]] * 50)
    params = [SequenceSampling(max_tokens=1, temperature=0.0), WARM] * 50
    tokens = sample_batch(logits, params, [None] * 100)
    assert set(tokens[0::2]) == {1}
    assert len(set(tokens[1::2])) > 1  # the warm rows really sample


def test_top_p_keeps_only_the_smallest_set_reaching_it() -> None:
    logits = torch.tensor([[0.6, 0.25, 0.1, 0.05]]).log().repeat(2_000, 1)
    nucleus = SequenceSampling(max_tokens=1, temperature=1.0, top_p=0.8)
    tokens = sample_batch(logits, [nucleus] * 2_000, [None] * 2_000)
    assert set(tokens) == {0, 1}  # 0.6 alone does not reach 0.8; 0.6 + 0.25 does


def test_a_seeded_row_draws_the_same_whatever_its_batch() -> None:
    torch.manual_seed(3)
    logits = torch.randn(1, 1_000)
    others = torch.randn(7, 1_000)

    def seeded(batch: torch.Tensor, row: int) -> list[int]:
        gen = torch.Generator().manual_seed(42)
        gens: list[torch.Generator | None] = [None] * batch.shape[0]
        gens[row] = gen
        return [sample_batch(batch, [WARM] * batch.shape[0], gens)[row] for _ in range(20)]

    alone = seeded(logits, 0)
    assert seeded(torch.cat([others[:3], logits, others[3:]]), 3) == alone
    assert len(set(alone)) > 1
