"""A tiny random-weight Llama shared by the engine tests (fast on a CPU)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from parley.engines.builtin.config import ModelConfig
from parley.engines.builtin.loader import expected_shapes
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.native.mode import use_native
from parley.engines.builtin.precision import Precision

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


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hugging Face-named weights for ``cfg``: N(0, 0.3), norms in [0.5, 1.5]."""
    torch.manual_seed(seed)
    weights = {}
    for name, shape in expected_shapes(cfg).items():
        if name.endswith("norm.weight"):
            weights[name] = torch.empty(shape).uniform_(0.5, 1.5)
        else:
            weights[name] = torch.empty(shape).normal_(0, 0.3)
    return weights


def tiny_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    return random_weights(TINY, seed)


def tiny_model(
    seed: int = 0, precision: Precision = Precision.FP32, packed: bool = False, native: bool = False
) -> LlamaModel:
    model = LlamaModel.from_hf(TINY, tiny_weights(seed), precision)
    if native:
        use_native(model)
    if packed:
        model.pack_weights()
    return model


# -- a tiny chat model in a Hugging Face folder (for whole-service tests of the engine) ------

CHAT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_CHAT = replace(
    TINY, vocab_size=256 + len(CHAT_SPECIALS), eos_token_ids=(258,), max_position_embeddings=4096
)


def save_tiny_chat_model(folder: Path, seed: int = 0) -> Path:
    """A random-weight Llama with a byte-level tokenizer (one token per byte, no merges) and
    a ChatML template, saved as a Hugging Face folder the built-in engine loads. Its output
    row for the end-of-turn token is zero, so it practically never ends an answer by itself:
    answers run to ``max_tokens``, long enough to stop or abort one mid-way."""
    folder.mkdir(parents=True, exist_ok=True)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(CHAT_SPECIALS))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE})
    )
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 258}))
    (folder / "config.json").write_text(json.dumps(_hf_config(TINY_CHAT)))
    weights = random_weights(TINY_CHAT, seed)
    weights["lm_head.weight"][258].zero_()
    save_file(weights, folder / "model.safetensors")
    return folder


def _hf_config(c: ModelConfig) -> dict[str, object]:
    return {
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "eos_token_id": list(c.eos_token_ids),
    }
