"""Choosing the next token of every sequence in a step at once.

Greedy rows (temperature 0) take one ``argmax`` over the batch. Sampled rows are scaled by
their temperatures, turned into probabilities in one softmax, cut to their top-p where asked
(one sort for those rows), and drawn by the exponential race: the token ``argmax(p / E)``
with ``E ~ Exp(1)`` independently per token is distributed as ``p``, so one batched draw
replaces a multinomial per row. A seeded sequence draws its row's noise from its own
generator, so its answer does not depend on what it was batched with.
"""

from __future__ import annotations

import torch
from torch import Tensor

from parley.engines.builtin.sequence import SamplingParams


def sample_batch(
    logits: Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
) -> list[int]:
    """One token per row of ``logits`` [S, vocab] (float32), row i sampled by ``params[i]``."""
    tokens = torch.argmax(logits, dim=-1)
    rows = [i for i, p in enumerate(params) if p.temperature > 0]
    if rows:
        picked = _draw(logits[rows], [params[i] for i in rows], [generators[i] for i in rows])
        tokens[rows] = picked
    return [int(t) for t in tokens.tolist()]


def sample(logits: Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from ``logits`` [vocab] (float32)."""
    return sample_batch(logits.unsqueeze(0), [params], [generator])[0]


def _draw(
    logits: Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
) -> Tensor:
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    probs = torch.softmax(logits / temps[:, None], dim=-1)
    nucleus = [i for i, p in enumerate(params) if p.top_p < 1.0]
    if nucleus:
        top_p = torch.tensor([params[i].top_p for i in nucleus], dtype=probs.dtype)
        probs[nucleus] = _top_p(probs[nucleus], top_p)
    noise = torch.empty_like(probs).exponential_()
    for i, generator in enumerate(generators):
        if generator is not None:
            noise[i].exponential_(generator=generator)
    return torch.argmax(probs / noise.clamp_(min=1e-30), dim=-1)  # never 0/0 for p = 0


def _top_p(probs: Tensor, top_p: Tensor) -> Tensor:
    """Zero all but the smallest set of each row's most likely tokens reaching its top_p."""
    ordered, index = torch.sort(probs, dim=-1, descending=True)
    cumulative = torch.cumsum(ordered, dim=-1)
    ordered = ordered.masked_fill(cumulative - ordered > top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter_(-1, index, ordered)
