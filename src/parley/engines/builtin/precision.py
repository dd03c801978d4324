"""How the built-in engine holds its weights and computes: the precisions and the default.

``fp32``: float32 weights, activations and KV cache (the reference: every other precision
is checked against its greedy answers). ``bf16``: bfloat16 weights, activations and KV cache;
fast only on CPUs with native bf16 (AVX-512 BF16 or AMX), emulated and slow elsewhere.
``int8``: weight-only int8, one scale per output channel (PyTorch's ``_weight_int8pack_mm``),
bf16 activations and KV cache. ``int4``: weight-only int4 in groups of 32 along the input
(PyTorch's ``_weight_int4pack_mm_for_cpu``), bf16 activations and KV cache. The embedding
table stays in the activation dtype in every precision (a lookup, not a product).

``auto`` (the setting's default) is chosen at start-up from the CPU's flags: bf16 where the
CPU has native bf16, else fp32 (see docs/ENGINE_PROFILE.md for the measurements behind it).
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

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype of activations and of the KV cache."""
        return torch.float32 if self is Precision.FP32 else torch.bfloat16

    @property
    def quantized(self) -> bool:
        return self in (Precision.INT8, Precision.INT4)


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
    """The precision to run: ``requested`` itself, or for ``auto`` the default for this
    device and CPU. Logs the choice and why."""
    if requested != AUTO:
        return Precision(requested)
    if device.type != "cpu":
        chosen, why = Precision.BF16, f"device {device.type}"
    else:
        native = NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags)
        if native:
            chosen, why = Precision.BF16, f"the CPU has native bf16 ({', '.join(sorted(native))})"
        else:
            chosen, why = Precision.FP32, "the CPU has no native bf16 (avx512_bf16, amx_bf16)"
    log.info("engine precision auto: %s, as %s", chosen.value, why)
    return chosen
