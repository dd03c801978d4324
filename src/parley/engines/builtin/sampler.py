"""Choosing the next token of every sequence in a step at once.

Greedy rows (temperature 0) take one ``argmax`` over the batch. Sampled rows are scaled by
their temperatures, turned into probabilities in one softmax, cut to their top-p where asked
(one sort for those rows), and drawn by inverse transform: one uniform number per row,
found in the row's cumulative sum (``searchsorted``). That is one random number a row where
``torch.multinomial`` (and the exponential race) draw one per vocabulary entry: at 64
sequences x 49,152 tokens those draws were most of the sampling time. A seeded sequence
draws its number from its own generator, so its answer does not depend on its batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from parley.engines.builtin.sequence import SequenceSampling


def sample_batch(
    logits: Tensor, params: list[SequenceSampling], generators: list[torch.Generator | None]
) -> list[int]:
    """One token per row of ``logits`` [S, vocab] (float32), row i sampled by ``params[i]``."""
    rows = [i for i, p in enumerate(params) if p.temperature > 0]
    if not rows:
        return [int(t) for t in torch.argmax(logits, dim=-1).tolist()]
    if len(rows) == len(params):
        return [int(t) for t in _draw(logits, params, generators).tolist()]
    tokens = torch.argmax(logits, dim=-1)
    tokens[rows] = _draw(logits[rows], [params[i] for i in rows], [generators[i] for i in rows])
    return [int(t) for t in tokens.tolist()]


# a sampled token's log probability, and the likeliest tokens' (id, log probability)
Sampled = tuple[float, tuple[tuple[int, float], ...]]


def logprobs_of(
    raw: Tensor, rows: list[int], tokens: list[int], counts: list[int]
) -> dict[int, Sampled]:
    """For each asking row (``rows[i]``, its ``raw`` log-softmax row ``i``): the log
    probability of its token and its ``counts[i]`` likeliest alternatives — the model's own
    distribution, before penalties, biases, grammar or temperature act (as vLLM's)."""
    out: dict[int, Sampled] = {}
    width = max(counts, default=0)
    top_values, top_ids = (
        torch.topk(raw, width, dim=-1) if width else (raw[:, :0], raw[:, :0].long())
    )
    chosen = raw[torch.arange(len(rows)), torch.tensor([tokens[r] for r in rows])].tolist()
    values, ids = top_values.tolist(), top_ids.tolist()
    for i, row in enumerate(rows):
        k = counts[i]
        out[row] = (float(chosen[i]), tuple(zip(ids[i][:k], values[i][:k], strict=True)))
    return out


def _draw(
    logits: Tensor, params: list[SequenceSampling], generators: list[torch.Generator | None]
) -> Tensor:
    """Inverse transform: the first token whose cumulative probability passes a uniform draw."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    probs = torch.softmax(logits / temps[:, None], dim=-1)
    nucleus = [i for i, p in enumerate(params) if p.top_p < 1.0]
    if nucleus:
        top_p = torch.tensor([params[i].top_p for i in nucleus], dtype=probs.dtype)
        probs[nucleus] = _top_p(probs[nucleus], top_p)
    cdf = probs.cumsum_(dim=-1)
    draws = torch.rand(len(params), 1, dtype=cdf.dtype)
    for i, generator in enumerate(generators):
        if generator is not None:
            draws[i] = torch.rand(1, generator=generator, dtype=cdf.dtype)
    tokens = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True)
    return tokens.squeeze(1).clamp_(max=cdf.shape[-1] - 1)


def _top_p(probs: Tensor, top_p: Tensor) -> Tensor:
    """Zero all but the smallest set of each row's most likely tokens reaching its top_p."""
    ordered, index = torch.sort(probs, dim=-1, descending=True)
    cumulative = torch.cumsum(ordered, dim=-1)
    ordered = ordered.masked_fill(cumulative - ordered > top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter_(-1, index, ordered)
