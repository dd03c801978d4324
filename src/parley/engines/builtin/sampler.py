"""Choosing the next token: greedy at temperature 0, else temperature + top-p sampling."""

from __future__ import annotations

import torch
from torch import Tensor

from parley.engines.builtin.sequence import SamplingParams


def sample(logits: Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from ``logits`` [vocab] (float32)."""
    if params.temperature <= 0:
        return int(torch.argmax(logits).item())
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = _top_p(probs, params.top_p)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _top_p(probs: Tensor, top_p: float) -> Tensor:
    ordered, index = torch.sort(probs, descending=True)
    cumulative = torch.cumsum(ordered, dim=-1)
    drop = cumulative - ordered > top_p  # keep the smallest set reaching top_p
    ordered = ordered.masked_fill(drop, 0.0)
    kept = torch.zeros_like(probs).scatter_(0, index, ordered)
    return kept / kept.sum()
