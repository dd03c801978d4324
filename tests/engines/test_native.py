"""The native decode step (engines/builtin/native/): float32 arithmetic on the weights the model
holds, the same answers as PyTorch's forward, and the ``native_decode`` setting's modes."""

from __future__ import annotations

import platform
import tempfile
from pathlib import Path

import pytest
import torch

from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.linear import Int4Linear, Int8Linear, make_linear
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.native import build
from parley.engines.builtin.native.build import NativeUnavailable
from parley.engines.builtin.native.decoder import MAX_ROWS
from parley.engines.builtin.native.mode import NativeMode, attach_native, use_native
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.settings import BuiltinEngineSettings
from tests.engines.tiny import TINY, tiny_model, tiny_weights

NATIVE = [Precision.FP32, Precision.INT8, Precision.INT4]
PROMPTS = [[5, 17, 33, 8], [9, 9, 9], list(range(3, 40)), [50], [11, 12, 13, 14, 15, 16, 17, 18]]


def held(weight: torch.Tensor, precision: Precision) -> torch.Tensor:
    """The float32 matrix a quantized one stands for, as the native step computes with it."""
    linear = make_linear(weight, precision)
    if isinstance(linear, Int8Linear):
        return linear.qweight.float() * linear.scale.float()[:, None]
    if isinstance(linear, Int4Linear):
        nibbles = linear.nibbles
        rows = nibbles.shape[0]
        q = torch.cat([(nibbles & 15).view(rows, -1, 16), (nibbles >> 4).view(rows, -1, 16)], -1)
        scale, minimum = linear.native_scales()
        return (q.float() * scale[..., None] + minimum[..., None]).view(rows, -1)
    return weight


def calls(model: LlamaModel) -> int:
    """How many steps the model's native decoder ran (counted by ``counting``)."""
    return int(getattr(model, "native_calls", 0))


def counting(model: LlamaModel) -> LlamaModel:
    native = model.native
    assert native is not None
    decode = native.decode

    def counted(*args):  # type: ignore[no-untyped-def]
        model.native_calls = calls(model) + 1  # type: ignore[attr-defined]
        return decode(*args)

    native.decode = counted  # type: ignore[method-assign]
    return model


def decode_logits(
    model: LlamaModel, steps: int, prompts: list[list[int]] = PROMPTS
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy answers to ``prompts`` in one batch, and the logits of every decode step."""
    core = EngineCore(model, num_blocks=64, block_size=4)
    seqs = [Sequence(f"s{i}", p, SequenceSampling(max_tokens=steps)) for i, p in enumerate(prompts)]
    for s in seqs:
        core.add(s)
    seen: list[torch.Tensor] = []
    forward = core.runner.forward

    def traced(chunks):  # type: ignore[no-untyped-def]
        logits = forward(chunks)
        if all(c.count == 1 for c in chunks):
            seen.append(logits.clone())
        return logits

    core.runner.forward = traced  # type: ignore[method-assign]
    while core.scheduler.has_work:
        core.step()
    return [s.output for s in seqs], seen


@pytest.mark.parametrize("precision", NATIVE, ids=lambda p: p.value)
def test_a_native_step_is_float32_on_the_weights_the_model_holds(precision: Precision) -> None:
    """int8 and int4 too: the native step reads their small weights and computes in float32,
    so its answers are PyTorch float32's on the dequantized matrices, token for token. (One-
    token prompts: every step decodes, none goes through PyTorch's bf16 products.)"""
    weights = {
        k: held(v, precision) if v.dim() == 2 and k != "model.embed_tokens.weight" else v
        for k, v in tiny_weights().items()
    }
    prompts = [[50], [7], [33], [90]]  # within every precision's MAX_ROWS
    want_tokens, want = decode_logits(LlamaModel.from_hf(TINY, weights), 12, prompts)
    native = counting(tiny_model(precision=precision, packed=True, native=True))
    got_tokens, got = decode_logits(native, 12, prompts)
    assert got_tokens == want_tokens
    assert len(got) == len(want) == 12
    assert calls(native) == 12
    for a, b in zip(got, want, strict=True):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-4


@pytest.mark.parametrize("precision", NATIVE, ids=lambda p: p.value)
def test_a_sequence_s_native_logits_are_the_same_bits_alone_and_batched(
    precision: Precision,
) -> None:
    """Every output is summed in one order whatever the batch (fp32 rows are read in fours,
    two inputs at a time; int8/int4 one row or a pair): a row beside 0 to 3 others gets the
    very same logits, so batching never changes a sequence's answer."""
    model = tiny_model(precision=precision, packed=True, native=True)
    prompts = [[50], [7], [33], [90]]
    _, batched = decode_logits(model, 6, prompts)
    for i, prompt in enumerate(prompts):
        _, alone = decode_logits(model, 6, [prompt])
        for step, logits in enumerate(alone):
            assert torch.equal(logits[0], batched[step][i]), (prompt, step)
    _, pair = decode_logits(model, 6, prompts[1:3])
    for step, logits in enumerate(pair):
        assert torch.equal(logits, batched[step][1:3])


def test_native_and_pytorch_steps_give_the_same_fp32_answers() -> None:
    prompts = PROMPTS[: MAX_ROWS[0]]  # fp32 steps of more rows go to PyTorch
    torch_tokens, torch_logits = decode_logits(tiny_model(packed=True), 16, prompts)
    native = tiny_model(packed=True, native=True)
    native_tokens, native_logits = decode_logits(native, 16, prompts)
    assert native_tokens == torch_tokens
    assert native.native is not None
    for a, b in zip(native_logits, torch_logits, strict=True):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


def test_the_native_step_writes_the_kv_cache_as_pytorch_does() -> None:
    """A prefill (PyTorch) after native decode steps reads what they cached: the prefix cache
    and chunked prefill stay valid across the two paths."""
    caches = []
    for native in (False, True):
        core = EngineCore(tiny_model(native=native), num_blocks=16, block_size=4)
        core.add(Sequence("s", [5, 6, 7], SequenceSampling(max_tokens=6)))
        while core.scheduler.has_work:
            core.step()
        caches.append(torch.stack(core.runner.kv_cache))
    assert torch.allclose(caches[0], caches[1], rtol=1e-4, atol=1e-5)
    assert caches[1].abs().sum() > 0


def test_w8a8_native_is_the_same_integer_product_as_onednn_s() -> None:
    """Both round each input row to int8 alike and sum exact integer products: the same
    answers, and logits equal up to the float scaling's rounding."""
    want_tokens, want = decode_logits(tiny_model(precision=Precision.W8A8, packed=True), 16)
    native = tiny_model(precision=Precision.W8A8, packed=True, native=True)
    got_tokens, got = decode_logits(native, 16)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


def test_bf16_has_no_native_step_and_auto_goes_on_without() -> None:
    model = tiny_model(precision=Precision.BF16)
    assert attach_native(model, NativeMode.AUTO) is False and model.native is None
    with pytest.raises(NativeUnavailable, match="no"):
        attach_native(model, NativeMode.ON)
    fp32 = tiny_model()
    assert attach_native(fp32, NativeMode.OFF) is False and fp32.native is None
    assert attach_native(fp32, NativeMode.ON) is True and fp32.native is not None


def test_without_a_compiler_auto_runs_pytorch_and_on_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "DEFAULT_CACHE_DIR", tmp_path)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", str(tmp_path))
    model = tiny_model()
    assert attach_native(model, NativeMode.AUTO) is False and model.native is None
    with pytest.raises(NativeUnavailable, match="no C compiler"):
        attach_native(model, NativeMode.ON)


def test_a_failed_build_says_why_and_leaves_no_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "source", lambda: "this is not C;\n")
    with pytest.raises(NativeUnavailable, match="compiling the native decode step failed"):
        build.load(tmp_path)
    assert not list(tmp_path.glob("*.so"))


def test_the_library_is_built_once_per_source_and_cpu(tmp_path: Path) -> None:
    first = build.library_path(tmp_path)
    build.load(tmp_path)
    built = first.stat().st_mtime_ns
    build.load(tmp_path)
    assert first.stat().st_mtime_ns == built
    assert build.library_path(tmp_path) == first


def test_a_cache_that_cannot_be_written_builds_into_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the image: a home that cannot be written (here: a cache directory that cannot
    be made, below a file; a non-root user's read-only home is refused by ``os.access``)."""
    (tmp_path / "file").write_text("")
    cache = tmp_path / "file" / "cache"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    lib = build.load(cache)
    built = tmp_path / "tmp" / "parley-native" / build.library_path(cache).name
    assert built.is_file() and lib._name == str(built)
    build.load(cache)  # found there by the next start of this container
    assert len(list((tmp_path / "tmp" / "parley-native").glob("*.so"))) == 1


def test_the_setting_takes_auto_on_off_and_nothing_else() -> None:
    assert BuiltinEngineSettings().native_decode == "auto"
    assert BuiltinEngineSettings(native_decode="off").native_decode == "off"
    with pytest.raises(ValueError, match="native_decode"):
        BuiltinEngineSettings(native_decode="fast")


@pytest.mark.parametrize(("precision", "native_steps"), [(Precision.FP32, 0), (Precision.INT8, 16)])
def test_steps_of_more_rows_than_the_precision_s_max_go_to_pytorch(
    precision: Precision, native_steps: int
) -> None:
    """fp32 decodes more than MAX_ROWS (8) rows in PyTorch (oneDNN is faster there); int8
    stays native at any batch (PyTorch's int8 rounds inputs to bf16: the answer would depend
    on the batch)."""
    model = counting(tiny_model(precision=precision, packed=True, native=True))
    prompts = [[n] for n in range(40, 40 + MAX_ROWS[0] + 1)]  # one more than fp32's max
    decode_logits(model, 16, prompts)  # 1 step of the one-token prompts, then 15 decode steps
    assert calls(model) == native_steps


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 builds")
@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"], ids=["avx2", "plain"])
@pytest.mark.parametrize("precision", [*NATIVE, Precision.W8A8], ids=lambda p: p.value)
def test_the_avx2_and_plain_builds_answer_as_this_cpu_s(
    march: str, precision: Precision, tmp_path: Path
) -> None:
    """The CPU of the day may lack AVX-512 (or even AVX2): those builds' code paths give the
    same answers."""
    prompts = PROMPTS[:4]
    want_tokens, want = decode_logits(tiny_model(precision=precision, native=True), 10, prompts)
    model = tiny_model(precision=precision)
    use_native(model, cache_dir=tmp_path, march=march)
    got_tokens, got = decode_logits(counting(model), 10, prompts)
    assert got_tokens == want_tokens and calls(model) > 0
    for a, b in zip(got, want, strict=True):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5
