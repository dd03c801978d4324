"""Our paged-KV Llama forward agrees with Hugging Face transformers' LlamaForCausalLM."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from tests.engines.tiny import TINY, tiny_model, tiny_weights

transformers = pytest.importorskip("transformers")


def hf_model() -> Any:
    cfg = transformers.LlamaConfig(
        vocab_size=TINY.vocab_size,
        hidden_size=TINY.hidden_size,
        intermediate_size=TINY.intermediate_size,
        num_hidden_layers=TINY.num_layers,
        num_attention_heads=TINY.num_heads,
        num_key_value_heads=TINY.num_kv_heads,
        head_dim=TINY.head_dim,
        rope_theta=TINY.rope_theta,
        rms_norm_eps=TINY.rms_norm_eps,
        max_position_embeddings=TINY.max_position_embeddings,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    model = transformers.LlamaForCausalLM(cfg)
    model.load_state_dict(tiny_weights(), strict=False)
    return model.eval()


def run_core(
    prompts: list[list[int]], steps: int, max_batch_tokens: int = 512
) -> tuple[list[list[int]], EngineCore]:
    core = EngineCore(tiny_model(), num_blocks=64, block_size=4, max_batch_tokens=max_batch_tokens)
    seqs = [
        Sequence(f"s{i}", list(p), SequenceSampling(max_tokens=steps))
        for i, p in enumerate(prompts)
    ]
    for s in seqs:
        core.add(s)
    while core.scheduler.has_work:
        core.step()
    return [s.output for s in seqs], core


def hf_greedy(model: Any, prompt: list[int], steps: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=steps, do_sample=False, eos_token_id=None)
    return [int(t) for t in out[0, len(prompt) :]]


PROMPTS = [[5, 17, 33, 8], [9, 9, 9], list(range(3, 40)), [50], [11, 12, 13, 14, 15, 16, 17, 18]]


def test_logits_match_transformers_in_float32() -> None:
    hf = hf_model()
    for prompt in PROMPTS:
        core = EngineCore(tiny_model(), num_blocks=64, block_size=4)
        seq = Sequence("s", list(prompt), SequenceSampling(max_tokens=1))
        core.add(seq)
        plan = core.scheduler.schedule()
        ours = core.runner.forward(plan.chunks)[0]
        with torch.no_grad():
            theirs = hf(torch.tensor([prompt])).logits[0, -1].float()
        rel = (ours - theirs).abs().max() / theirs.abs().max()
        assert rel < 1e-3, rel


def test_greedy_tokens_match_transformers_batched_and_alone() -> None:
    hf = hf_model()
    expected = [hf_greedy(hf, p, 24) for p in PROMPTS]
    batched, _ = run_core(PROMPTS, 24)
    assert batched == expected
    for prompt, want in zip(PROMPTS, expected, strict=True):
        alone, _ = run_core([prompt], 24)
        assert alone == [want]


def test_chunked_prefill_gives_the_same_tokens() -> None:
    long = [list(range(2, 90))]
    whole, _ = run_core(long, 16, max_batch_tokens=512)
    chunked, _ = run_core(long, 16, max_batch_tokens=7)
    assert chunked == whole
