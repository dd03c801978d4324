"""The shape of a Llama-family model, read from GGUF metadata or a Hugging Face config.json."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gguf import GGUFReader

from parley.errors import ConfigurationError

SUPPORTED_ARCHITECTURES = ("llama",)


class ModelNotFound(ConfigurationError):
    """The model file or folder does not exist."""


class UnsupportedModel(ConfigurationError):
    """The model exists but is not something the built-in engine can run."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_gguf_metadata(
        cls, metadata: Mapping[str, Any], tensor_names: Collection[str]
    ) -> ModelConfig:
        """From a GGUF file's key/values (see ``gguf_metadata``) and its tensor names.

        GGUF does not state whether embeddings are tied: they are when there is no
        ``output.weight`` tensor.
        """
        arch = str(metadata.get("general.architecture"))
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModel(f"GGUF architecture {arch!r} is not supported (only llama)")
        _reject_gguf_rope_scaling(metadata, arch)

        def key(name: str, default: Any = None) -> Any:
            value = metadata.get(f"{arch}.{name}", default)
            if value is None:
                raise UnsupportedModel(f"GGUF metadata lacks {arch}.{name}")
            return value

        hidden = int(key("embedding_length"))
        heads = int(key("attention.head_count"))
        tokens = metadata.get("tokenizer.ggml.tokens")
        vocab_default = len(tokens) if isinstance(tokens, list) else None
        return cls(
            vocab_size=int(key("vocab_size", vocab_default)),
            hidden_size=hidden,
            intermediate_size=int(key("feed_forward_length")),
            num_layers=int(key("block_count")),
            num_heads=heads,
            num_kv_heads=int(key("attention.head_count_kv", heads)),
            head_dim=int(key("rope.dimension_count", hidden // heads)),
            rope_theta=float(key("rope.freq_base", 10_000.0)),
            rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
            max_position_embeddings=int(key("context_length")),
            tie_word_embeddings="output.weight" not in tensor_names,
            bos_token_id=_optional_int(metadata.get("tokenizer.ggml.bos_token_id")),
            eos_token_ids=gguf_eos_token_ids(metadata),
        )

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelConfig:
        """From the config.json of a Hugging Face Llama model folder."""
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModel(f"model_type {model_type!r} is not supported (only llama)")
        if config.get("attention_bias") or config.get("mlp_bias"):
            raise UnsupportedModel("Llama models with attention or MLP biases are not supported")
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            rope_theta=_hf_rope_theta(config),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            bos_token_id=_optional_int(config.get("bos_token_id")),
            eos_token_ids=_int_tuple(config.get("eos_token_id")),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        data = json.loads(text)
        data["eos_token_ids"] = tuple(data["eos_token_ids"])
        return cls(**data)


def gguf_metadata(reader: GGUFReader) -> dict[str, Any]:
    """Every key/value of a ``gguf.GGUFReader`` as plain Python values (lists for arrays)."""
    return {
        name: field.contents()
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")
    }


def gguf_eos_token_ids(metadata: Mapping[str, Any]) -> tuple[int, ...]:
    """End-of-sequence, end-of-turn and end-of-message ids, those the file states, deduplicated."""
    keys = ("eos_token_id", "eot_token_id", "eom_token_id")
    ids = [metadata.get(f"tokenizer.ggml.{k}") for k in keys]
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


def _reject_gguf_rope_scaling(metadata: Mapping[str, Any], arch: str) -> None:
    scaling = metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise UnsupportedModel(f"RoPE scaling {scaling!r} is not supported")


def _hf_rope_theta(config: Mapping[str, Any]) -> float:
    """rope_theta from a transformers 4 (top-level) or 5 (``rope_parameters``) config."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    for rope in (params, scaling):
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise UnsupportedModel(f"RoPE scaling {kind!r} is not supported")
    return float(params.get("rope_theta", config.get("rope_theta", 10_000.0)))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _int_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(int(v) for v in value)
    return (int(value),)
