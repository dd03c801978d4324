"""Every precision of the built-in engine keeps the engine's promises on a tiny random model:
greedy batched = alone, chunked prefill = whole, the prefix cache changes no token, an abort
frees the blocks at once; and its logits stay near float32's."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from parley.engines.builtin.aligned import read_aligned, write_aligned
from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.linear import INT4_GROUP, DenseLinear, make_linear
from parley.engines.builtin.model import LlamaModel, build_weights
from parley.engines.builtin.precision import Precision, choose
from parley.engines.builtin.sequence import SeqStatus, Sequence, SequenceSampling
from parley.engines.settings import BuiltinEngineSettings
from tests.engines.tiny import TINY, random_weights, tiny_model, tiny_weights

PRECISIONS = list(Precision)
NATIVE = (Precision.FP32, Precision.INT8, Precision.INT4, Precision.W8A8)  # native steps
# every precision as the engine runs it (dense matrices packed for oneDNN; decode steps
# native where the native step serves the precision), the dense ones unpacked (F.linear)
# too, and every precision's decode steps in PyTorch
BUILDS = [
    pytest.param(
        p, packed, native, id=f"{p.value}{'-packed' if packed else ''}{'-native' if native else ''}"
    )
    for p in PRECISIONS
    for packed in ((False, True) if not p.quantized else (True,))
    for native in ((False, True) if p in NATIVE and packed else (False,))
]
PROMPTS = [[5, 17, 33, 8], [9, 9, 9], list(range(3, 40)), [50], [11, 12, 13, 14, 15, 16, 17, 18]]
# largest |logit error| / max |logit| against float32 on the tiny model
TOLERANCE = {
    Precision.FP32: 1e-5,
    Precision.BF16: 0.05,
    Precision.INT8: 0.05,
    Precision.INT4: 0.05,
    # w8a8 also rounds every product's input row to 8 bits (1/254 of the row's largest value),
    # which compounds over the tiny random model's layers: ~9% here, against int8's ~1%
    Precision.W8A8: 0.12,
}


def core(
    precision: Precision,
    packed: bool,
    native: bool = False,
    num_blocks: int = 64,
    max_batch_tokens: int = 512,
) -> EngineCore:
    return EngineCore(
        tiny_model(precision=precision, packed=packed, native=native),
        num_blocks=num_blocks,
        block_size=4,
        max_batch_tokens=max_batch_tokens,
    )


def run(c: EngineCore, prompts: list[list[int]], steps: int) -> list[list[int]]:
    return [s.output for s in run_traced(c, prompts, steps)[0]]


def run_traced(
    c: EngineCore, prompts: list[list[int]], steps: int
) -> tuple[list[Sequence], dict[str, list[torch.Tensor]]]:
    """The finished sequences, and the logits each sampled from, step by step."""
    seqs = [
        Sequence(f"s{i}", list(p), SequenceSampling(max_tokens=steps))
        for i, p in enumerate(prompts)
    ]
    logits: dict[str, list[torch.Tensor]] = {s.seq_id: [] for s in seqs}
    sample = c.runner.sample

    def traced(rows: torch.Tensor, sampled: list[Sequence]) -> tuple[list[int], dict[int, Any]]:
        for row, s in zip(rows, sampled, strict=True):
            logits.setdefault(s.seq_id, []).append(row.clone())
        return sample(rows, sampled)

    c.runner.sample = traced  # type: ignore[method-assign,assignment]
    for s in seqs:
        c.add(s)
    for _ in range(10_000):
        if not c.scheduler.has_work:
            break
        c.step()
    assert not c.scheduler.has_work, "the engine did not finish"
    return seqs, logits


# bf16 activations round differently in a different batch (its padding, its kernels' blocking):
# a greedy answer may part from the same prompt's answer alone only where its two best tokens
# were within that rounding of each other
NEAR_TIE = 0.25


def promises_tokens(precision: Precision, native: bool) -> bool:
    """Whether the build's greedy answer is the same alone, batched, chunked and from the
    prefix cache: fp32, and the quantized precisions whose decode steps are native (each
    output summed in the same order whatever the batch). Their logits still differ in the
    last bits, by the prefill's batch (PyTorch's kernels block by it), not their tokens
    on the tiny model."""
    return precision is Precision.FP32 or (native and precision.quantized)


def assert_same_answer(
    precision: Precision,
    native: bool,
    got: tuple[list[int], list[torch.Tensor]],
    want: tuple[list[int], list[torch.Tensor]],
) -> None:
    """``got`` (tokens, the logits each was sampled from) is ``want``: the same logits (to
    the precision's tolerance) up to where the two part, which may only be at a near tie,
    and never for a build that promises its tokens."""
    (got_tokens, got_logits), (want_tokens, want_logits) = got, want
    assert len(got_tokens) == len(want_tokens)
    if promises_tokens(precision, native):
        assert got_tokens == want_tokens
    parted = next(
        (n for n, (a, b) in enumerate(zip(got_tokens, want_tokens, strict=True)) if a != b),
        len(want_tokens),
    )
    for step in range(parted):
        a, b = got_logits[step], want_logits[step]
        error = float((a - b).abs().max()) / float(b.abs().max())
        assert error <= TOLERANCE[precision], (precision, step, error)
    if parted < len(want_tokens):
        best, second = torch.topk(want_logits[parted], 2).values.tolist()
        assert best - second < NEAR_TIE, (precision, parted, best - second)


def answer(
    seq: Sequence, logits: dict[str, list[torch.Tensor]]
) -> tuple[list[int], list[torch.Tensor]]:
    return seq.output, logits[seq.seq_id]


@pytest.mark.parametrize(("precision", "packed", "native"), BUILDS)
def test_greedy_batched_equals_alone(precision: Precision, packed: bool, native: bool) -> None:
    batched, batched_logits = run_traced(core(precision, packed, native), PROMPTS, 16)
    for i, prompt in enumerate(PROMPTS):
        (alone,), trace = run_traced(core(precision, packed, native), [prompt], 16)
        assert len(alone.output) == 16
        assert_same_answer(
            precision, native, answer(batched[i], batched_logits), answer(alone, trace)
        )


@pytest.mark.parametrize(("precision", "packed", "native"), BUILDS)
def test_chunked_prefill_gives_the_same_tokens(
    precision: Precision, packed: bool, native: bool
) -> None:
    long = [list(range(2, 90))]
    (whole,), trace = run_traced(core(precision, packed, native), long, 12)
    (chunked,), chunked_trace = run_traced(
        core(precision, packed, native, max_batch_tokens=7), long, 12
    )
    assert_same_answer(precision, native, answer(chunked, chunked_trace), answer(whole, trace))


@pytest.mark.parametrize(("precision", "packed", "native"), BUILDS)
def test_the_prefix_cache_changes_no_token(
    precision: Precision, packed: bool, native: bool
) -> None:
    shared = list(range(3, 43))
    warm = core(precision, packed, native)
    run(warm, [[*shared, 50, 51]], 8)
    (second,), warm_trace = run_traced(warm, [[*shared, 60, 61, 62]], 8)
    assert second.num_cached_prompt == 40
    (cold,), trace = run_traced(core(precision, packed, native), [[*shared, 60, 61, 62]], 8)
    assert_same_answer(precision, native, answer(second, warm_trace), answer(cold, trace))


@pytest.mark.parametrize(("precision", "packed", "native"), BUILDS)
def test_abort_frees_the_blocks_at_once(precision: Precision, packed: bool, native: bool) -> None:
    c = core(precision, packed, native, num_blocks=32)
    s = Sequence("a", list(range(3, 30)), SequenceSampling(max_tokens=100, temperature=0.8))
    c.add(s)
    for _ in range(3):
        c.step()
    assert c.blocks.usage > 0 and s.output
    c.abort(s)
    assert s.status is SeqStatus.FINISHED
    assert c.blocks.usage == 0
    assert not c.scheduler.has_work


@pytest.mark.parametrize(("precision", "packed", "native"), BUILDS)
def test_logits_are_float32_s_of_the_weights_it_holds(
    precision: Precision, packed: bool, native: bool
) -> None:
    """Every precision is float32 on the weights it holds (bf16-rounded, or dequantized int8
    and int4), up to bf16's rounding of the products' inputs."""
    weights = tiny_weights()
    if precision is not Precision.FP32:
        weights = {k: dequantized(k, v, precision) for k, v in weights.items()}

    def logits(model: LlamaModel, prompt: list[int]) -> torch.Tensor:
        c = EngineCore(model, num_blocks=64, block_size=4)
        c.add(Sequence("s", list(prompt), SequenceSampling(max_tokens=1)))
        return c.runner.forward(c.scheduler.schedule().chunks)[0]

    for prompt in PROMPTS:
        want = logits(LlamaModel.from_hf(TINY, weights), prompt)
        got = logits(tiny_model(precision=precision, packed=packed, native=native), prompt)
        assert got.dtype == torch.float32  # logits come back in float32 for sampling
        rel = float((got - want).abs().max() / want.abs().max())
        assert rel <= TOLERANCE[precision] + 1e-5, (precision, rel)


def dequantized(name: str, weight: torch.Tensor, precision: Precision) -> torch.Tensor:
    """The weight as the quantized model holds it (its embedding table is not quantized)."""
    if weight.dim() != 2 or name == "model.embed_tokens.weight":
        return weight
    return make_linear(weight, precision).dequantized().float()


@pytest.mark.parametrize("precision", [Precision.INT8, Precision.INT4, Precision.W8A8])
def test_a_quantized_weight_is_within_half_a_step_of_the_float_one(precision: Precision) -> None:
    torch.manual_seed(1)
    weight = torch.randn(48, 4 * INT4_GROUP)
    linear = make_linear(weight, precision)
    error = (linear.dequantized() - weight).abs()
    if precision is not Precision.INT4:
        step = weight.abs().amax(dim=1, keepdim=True) / 127
    else:
        groups = weight.view(48, -1, INT4_GROUP)
        step = ((groups.amax(-1) - groups.amin(-1)) / 15).repeat_interleave(INT4_GROUP, dim=1)
    assert bool((error <= step * 0.51 + 0.02).all())  # bf16 scales add a little
    x = torch.randn(5, 4 * INT4_GROUP)
    got = linear(x.to(precision.activation_dtype)).float()
    assert torch.allclose(
        got, x @ linear.dequantized().T, rtol=0.02, atol=0.05 * float(got.abs().max())
    )


def test_w8a8_is_the_integer_product_of_the_rounded_row_and_weights_in_any_batch() -> None:
    """Each row is rounded to int8 on its own (scale = its largest |value| / 127), the product is
    exact integer arithmetic times the two scales, and a row's result is bit-identical alone
    and in a batch (so answers never depend on the batch)."""
    torch.manual_seed(2)
    weight, x = torch.randn(40, 96), torch.randn(7, 96) * torch.arange(1, 8)[:, None]
    linear = make_linear(weight, Precision.W8A8)
    w_scale = weight.abs().amax(1) / 127
    q_w = torch.round(weight / w_scale[:, None])
    x_scale = x.abs().amax(1) / 127
    q_x = torch.round(x / x_scale[:, None])
    want = (q_x.double() @ q_w.double().T) * w_scale.double() * x_scale.double()[:, None]
    got = linear(x)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4)
    for i in range(x.shape[0]):
        assert torch.equal(linear(x[i : i + 1])[0], got[i])


def test_int4_refuses_inputs_not_in_whole_groups() -> None:
    with pytest.raises(ValueError, match="divisible by 32"):
        make_linear(torch.randn(8, 48), Precision.INT4)


def test_auto_is_fp32_on_a_cpu_with_or_without_native_bf16(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cpu = torch.device("cpu")
    with caplog.at_level("INFO", logger="parley.engines.builtin.precision"):
        assert choose("auto", cpu, frozenset({"avx2", "avx512f", "amx_bf16"})) is Precision.FP32
    assert "native bf16 (amx_bf16)" in caplog.text  # the operator learns bf16 is an option
    assert choose("auto", cpu, frozenset({"avx2", "fma"})) is Precision.FP32
    assert choose("auto", torch.device("cuda")) is Precision.BF16
    assert choose("int8", cpu, frozenset()) is Precision.INT8


def test_the_former_dtype_setting_reads_as_a_precision() -> None:
    assert BuiltinEngineSettings.model_validate({"dtype": "bfloat16"}).precision == "bf16"
    assert BuiltinEngineSettings.model_validate({"dtype": "float32"}).precision == "fp32"
    assert BuiltinEngineSettings.model_validate({}).precision == "auto"
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        BuiltinEngineSettings.model_validate({"dtype": "float16"})
    with pytest.raises(ValueError, match="'auto', 'fp32', 'bf16', 'int8', 'int4' or 'w8a8'"):
        BuiltinEngineSettings.model_validate({"precision": "fp8"})


@pytest.mark.parametrize("precision", [Precision.FP32, Precision.BF16])
def test_packing_hands_every_dense_matrix_to_onednn_and_keeps_its_values(
    precision: Precision,
) -> None:
    model = tiny_model(precision=precision)
    before = model.lm_head.dequantized().clone()
    packed = model.pack_weights()
    dense_bf16 = precision is Precision.BF16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert packed == (0 if dense_bf16 else 4 * TINY.num_layers + 1)
    assert torch.equal(model.lm_head.dequantized(), before)
    assert model.pack_weights() == packed  # packing twice changes nothing


def _mapped_files(tensor: torch.Tensor) -> set[str]:
    """The files (per /proc/self/maps) whose mapping holds ``tensor``'s first byte."""
    address, files = tensor.data_ptr(), set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, *rest = line.split()
        start, end = (int(x, 16) for x in span.split("-"))
        if start <= address < end and len(rest) >= 5:
            files.add(rest[4])
    return files


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc/self/maps")
def test_after_packing_the_embedding_is_read_from_a_fresh_mapping_not_a_copy(
    tmp_path: Path,
) -> None:
    # the pages of the first mapping were all read to pack: kept, they would stay resident
    file = tmp_path / "built.safetensors"
    write_aligned(build_weights(TINY, tiny_weights(), Precision.FP32), file, {})
    plain = EngineCore(LlamaModel(TINY, read_aligned(file)), num_blocks=64, block_size=4)
    model = LlamaModel(TINY, read_aligned(file))
    first = weakref.ref(model.embed)
    model.pack_weights(lambda: read_aligned(file))
    gc.collect()
    assert first() is None  # nothing holds the first mapping's embedding
    assert _mapped_files(model.embed) == {str(file)}  # not an anonymous copy
    assert _mapped_files(model.layers[1].mlp_norm) == {str(file)}
    packed = EngineCore(model, num_blocks=64, block_size=4)
    prompts = [[1, 5, 9, 14], [1, 7, 7, 30, 2]]
    assert run(packed, prompts, 6) == run(plain, prompts, 6)
    # without a fresh mapping, they are copied out (anonymous memory)
    copied = LlamaModel(TINY, read_aligned(file))
    copied.pack_weights()
    assert str(file) not in _mapped_files(copied.embed)


def test_w8a8_packs_every_matrix_and_then_holds_nothing_of_the_first_mapping(
    tmp_path: Path,
) -> None:
    file = tmp_path / "built.safetensors"
    write_aligned(build_weights(TINY, tiny_weights(), Precision.W8A8), file, {})
    built = read_aligned(file)
    mapped = [weakref.ref(built[f"layers.0.qkv.{part}"]) for part in ("qweight", "scale")]
    model = LlamaModel(TINY, built, Precision.W8A8)
    del built
    assert model.pack_weights(lambda: read_aligned(file)) == 4 * TINY.num_layers + 1
    gc.collect()
    assert [ref() for ref in mapped] == [None, None]  # its pages need not stay resident
    unpacked = LlamaModel(TINY, build_weights(TINY, tiny_weights(), Precision.W8A8), Precision.W8A8)
    prompts = [[1, 5, 9, 14], [1, 7, 7, 30, 2]]
    got = run(EngineCore(model, num_blocks=64, block_size=4), prompts, 6)
    assert got == run(EngineCore(unpacked, num_blocks=64, block_size=4), prompts, 6)


@pytest.mark.parametrize("precision", PRECISIONS, ids=[p.value for p in PRECISIONS])
def test_a_tied_head_is_held_at_every_precision(precision: Precision) -> None:
    """SmolLM2 ties its head to the embedding: a quantized precision holds the head quantized
    (the lookup stays float32), a dense one shares the table."""
    tied = dataclasses.replace(TINY, tie_word_embeddings=True)
    weights = {k: v for k, v in random_weights(tied).items() if k != "lm_head.weight"}
    model = LlamaModel.from_hf(tied, weights, precision)
    model.pack_weights()
    head = model.lm_head.dequantized().float()
    assert head.shape == model.embed.shape
    step = 0.1 if precision is Precision.INT4 else 0.02  # of the largest weight
    assert torch.allclose(head, model.embed, atol=step * float(model.embed.abs().max()))
    assert isinstance(model.lm_head, DenseLinear) is not precision.quantized
    c = EngineCore(model, num_blocks=64, block_size=4)
    assert all(len(out) == 5 for out in run(c, PROMPTS[:2], 5))
