"""KV cache bytes per token, computed from a model's dimensions (never guessed).

Each layer stores a key and a value vector per KV head per token:
``2 x layers x kv_heads x head_dim x bytes per element``.
"""

from __future__ import annotations

from dataclasses import dataclass

# bits, so int4's half a byte stays exact
DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}

KIB = 1024
MIB = 1024**2
GIB = 1024**3


class CapacityInputError(ValueError):
    """An input the planner cannot use; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ModelDims:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: str
    context_length: int  # the model's window: the longest sequence it can hold
    note: str = ""

    def __post_init__(self) -> None:
        for field in ("layers", "kv_heads", "head_dim", "context_length"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise CapacityInputError(f"{field} must be a positive whole number, not {value!r}")
        dtype_bits(self.kv_dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        bits = 2 * self.layers * self.kv_heads * self.head_dim * dtype_bits(self.kv_dtype)
        return bits // 8

    def with_dtype(self, kv_dtype: str) -> ModelDims:
        return ModelDims(
            self.name,
            self.layers,
            self.kv_heads,
            self.head_dim,
            kv_dtype,
            self.context_length,
            self.note,
        )


def dtype_bits(name: str) -> int:
    bits = DTYPE_BITS.get(name.lower())
    if bits is None:
        raise CapacityInputError(f"unknown KV dtype {name!r}: one of {', '.join(DTYPE_BITS)}")
    return bits


# Dims from each model's config.json. SmolLM2-135M is the built-in engine's bundled model
# (engines/builtin: ModelConfig reads the same numbers from its GGUF); its KV cache is
# float32 whatever the weights' precision.
PRESETS = {
    "llama-3-70b": ModelDims(
        "llama-3-70b", 80, 8, 128, "fp8", 8192, "Llama-3-70B config.json; FP8 cache as the seed"
    ),
    "llama-3-8b": ModelDims("llama-3-8b", 32, 8, 128, "bf16", 8192, "Llama-3-8B config.json"),
    "smollm2-135m": ModelDims(
        "smollm2-135m", 30, 3, 64, "fp32", 8192, "SmolLM2-135M (the built-in engine's model)"
    ),
}


def preset(name: str) -> ModelDims:
    dims = PRESETS.get(name.lower())
    if dims is None:
        raise CapacityInputError(f"unknown model {name!r}: one of {', '.join(PRESETS)}")
    return dims


def parse_bytes(text: str) -> int:
    """``110GB`` (10^9), ``80GiB`` (2^30), ``512MiB``, ``4096`` (bytes)."""
    units = {
        "tib": 1024**4, "gib": GIB, "mib": MIB, "kib": KIB,
        "tb": 10**12, "gb": 10**9, "mb": 10**6, "kb": 10**3, "b": 1,
    }  # fmt: skip
    raw = text.strip().lower().replace(" ", "")
    for unit, scale in units.items():
        if raw.endswith(unit):
            number, multiplier = raw[: -len(unit)], scale
            break
    else:
        number, multiplier = raw, 1
    try:
        value = float(number)
    except ValueError:
        raise CapacityInputError(f"{text!r} is not a size such as 110GB, 80GiB or 512MiB") from None
    if not value > 0:
        raise CapacityInputError(f"a memory size must be positive, not {text!r}")
    return int(value * multiplier)


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return f"{n / scale:,.4g} {unit}"
    return f"{n:,.0f} B"
