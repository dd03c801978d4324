"""A sequence's logits shaped before sampling: OpenAI's penalties and logit bias, and the
top-k and min-p cuts that vLLM and llama.cpp take. Only the rows that ask are touched (most
ask nothing), in place, before ``sampler.sample_batch`` picks each row's token."""

from __future__ import annotations

import torch
from torch import Tensor

from parley.engines.builtin.sequence import Sequence, SequenceSampling


def shape_logits(logits: Tensor, seqs: list[Sequence]) -> None:
    """Row i of ``logits`` [S, vocab] shaped by ``seqs[i]``'s parameters, in place (the
    logits are the model's inference tensors: changed under inference mode)."""
    shaped = [i for i, seq in enumerate(seqs) if seq.params.shapes_logits]
    if not shaped:
        return
    with torch.inference_mode():
        for i in shaped:
            _shape(logits[i], seqs[i].params, seqs[i].output)


def _shape(row: Tensor, p: SequenceSampling, output: list[int]) -> None:
    if p.logit_bias:
        ids = torch.tensor([token for token, _ in p.logit_bias], dtype=torch.long)
        row[ids] += torch.tensor([bias for _, bias in p.logit_bias], dtype=row.dtype)
    if (p.frequency_penalty or p.presence_penalty) and output:
        counts = torch.bincount(torch.tensor(output), minlength=row.shape[0])[: row.shape[0]]
        said = counts.to(row.dtype)
        row -= p.frequency_penalty * said + p.presence_penalty * (said > 0).to(row.dtype)
    if p.top_k and p.top_k < row.shape[0]:
        kth = torch.topk(row, p.top_k).values[-1]
        row.masked_fill_(row < kth, float("-inf"))
    if p.min_p:
        probs = torch.softmax(row / (p.temperature or 1.0), dim=-1)
        row.masked_fill_(probs < p.min_p * probs.max(), float("-inf"))
