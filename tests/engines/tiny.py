"""A tiny random-weight Llama shared by the engine tests (fast on a CPU)."""

from __future__ import annotations

import torch

from parley.engines.builtin.config import ModelConfig
from parley.engines.builtin.model import LlamaModel

TINY = ModelConfig(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    rope_theta=10_000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_ids=(2,),
)


def tiny_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = LlamaModel(TINY)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return {k: v.clone() for k, v in model.state_dict().items()}


def tiny_model(seed: int = 0) -> LlamaModel:
    model = LlamaModel(TINY)
    model.load_weights(tiny_weights(seed))
    return model.eval()
