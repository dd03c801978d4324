"""How the built-in engine holds its weights and computes: the precisions and the default.

``fp32``: float32 weights (the reference: every other precision is checked against its
greedy answers). ``bf16``: bfloat16 weights and product inputs; fast only on CPUs with native
bf16 (AVX-512 BF16 or AMX), emulated and slow elsewhere. ``int8``: weight-only int8, one scale
per output channel (PyTorch's ``_weight_int8pack_mm``). ``int4``: weight-only int4 in groups of
32 along the input (PyTorch's ``_weight_int4pack_mm_for_cpu``). ``w8a8``: the same int8
weights, and each product's input row quantized to int8 on the fly (one scale a row), so the
products are integer ones (oneDNN's quantized linear: VNNI or AMX where the CPU has them), as
llama.cpp's Q8_0 products are; the throughput mode (about 3x int8's tokens a second at 64
concurrent requests), with more answers parted from fp32's than int8's. The embedding table
stays float32 in every precision (a lookup, not a product).

Every precision keeps the residual stream, norms, attention and the KV cache in float32;
only the weight products take bf16 inputs (kept all-bf16, answers parted from fp32's more
often and the capital of France was lost). ``auto`` (the setting's default) is fp32 on a CPU
(bf16 on a GPU); see ``choose`` and docs/ENGINE_PROFILE.md for why.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path

import torch

log = logging.getLogger(__name__)


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    INT8 = "int8"
    INT4 = "int4"
    W8A8 = "w8a8"

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype of the residual stream, norms, attention and the KV cache: float32 in
        every precision (bf16 there cost answers: see docs/ENGINE_PROFILE.md)."""
        return torch.float32

    @property
    def kernel_dtype(self) -> torch.dtype:
        """The dtype of the weight products' inputs: bf16 but for fp32 (and w8a8, whose
        products quantize their float32 inputs themselves)."""
        return torch.float32 if self in (Precision.FP32, Precision.W8A8) else torch.bfloat16

    @property
    def quantized(self) -> bool:
        return self in (Precision.INT8, Precision.INT4, Precision.W8A8)


AUTO = "auto"
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not there to read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def choose(requested: str, device: torch.device, flags: frozenset[str] | None = None) -> Precision:
    """The precision to run: ``requested`` itself, or for ``auto`` fp32 on a CPU (bf16 on a
    GPU). Measured on a CPU with native bf16 (docs/ENGINE_PROFILE.md), bf16 served 1.5x the
    tokens of fp32 at 8 to 64 concurrent requests, but its greedy answers parted from fp32's on
    46% of the 50 prompts of bench/engine_quality.py; a precision that answers differently is
    chosen by the operator, not by default. Logs the choice and, where bf16 is native, that."""
    if requested != AUTO:
        return Precision(requested)
    if device.type != "cpu":
        log.info("engine precision auto: bf16 on %s", device.type)
        return Precision.BF16
    native = NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags)
    hint = (
        f'; the CPU has native bf16 ({", ".join(sorted(native))}): precision = "bf16" '
        "serves more tokens a second, with answers that differ from fp32's more often"
        if native
        else ""
    )
    log.info("engine precision auto: fp32%s", hint)
    return Precision.FP32
