"""Weight matrices at a precision: dense (fp32/bf16), int8 per channel (weight-only, or with
the inputs quantized too: w8a8), int4 in groups.

Each is a callable ``y = linear(x)`` with ``x`` [T, in] in the precision's activation dtype
and ``y`` [T, out] in the same dtype. The quantized ones are weight-only: activations stay
bf16, and PyTorch's own CPU kernels do the products (``_weight_int8pack_mm``,
``_weight_int4pack_mm_for_cpu``), which read the small weights directly. ``dequantized()``
gives back the float weight a quantized matrix stands for (for checks).
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from parley.engines.builtin.precision import Precision, cpu_flags

INT4_GROUP = 32  # input columns sharing one scale and zero (llama.cpp's Q4 blocks are 32 too)
_INT4_MAX = 15
_INT4_ROWS = 16  # _convert_weight_to_int4pack_for_cpu packs output rows in sixteens


class Linear(Protocol):
    out_features: int

    def __call__(self, x: Tensor) -> Tensor: ...

    def dequantized(self) -> Tensor: ...


Parts = dict[str, Tensor]  # a matrix's tensors as held (and cached): see quantize()


class DenseLinear:
    """fp32 or bf16 weights, ``F.linear``'s products; on a CPU, ``pack`` hands the matrix to
    oneDNN once, reordered into its blocked layout (``mkldnn._reorder_linear_weight``, as
    inductor's frozen CPU graphs do), and the products run on that: about 2x ``F.linear``'s
    at batch 1 to 64 and at prefill sizes in fp32 (docs/ENGINE_PROFILE.md). Only the packed
    copy is kept; ``dequantized`` unpacks it."""

    def __init__(self, parts: Parts) -> None:
        self.weight = parts["weight"]
        self.out_features = self.weight.shape[0]
        self.packed = False

    def pack(self) -> bool:
        """Reorder the matrix for oneDNN's products, where oneDNN takes it (a CPU tensor,
        fp32, or bf16 where oneDNN has bf16); whether it did."""
        if not self.packed and _packable(self.weight):
            self.weight = torch.ops.mkldnn._reorder_linear_weight(self.weight)
            self.packed = True
        return self.packed

    def __call__(self, x: Tensor) -> Tensor:
        dtype = self.weight.dtype
        x_in = x if x.dtype == dtype else x.to(dtype)
        if self.packed:
            y: Tensor = torch.ops.mkldnn._linear_pointwise(x_in, self.weight, None, "none", [], "")
        else:
            y = F.linear(x_in, self.weight)
        return y if x.dtype == dtype else y.to(x.dtype)

    def dequantized(self) -> Tensor:
        return self.weight.to_dense() if self.packed else self.weight


def _packable(weight: Tensor) -> bool:
    if weight.device.type != "cpu" or not torch._C._has_mkldnn:
        return False
    if weight.dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return weight.dtype == torch.float32


class Int8Linear:
    """Symmetric int8, one scale per output row: w ≈ q * scale."""

    def __init__(self, parts: Parts) -> None:
        self.qweight, self.scale = parts["qweight"], parts["scale"]
        self.out_features = self.qweight.shape[0]

    @staticmethod
    def quantize(weight: Tensor, dtype: torch.dtype) -> Parts:
        w = weight.float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        qweight = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        return {"qweight": qweight, "scale": scale.to(dtype)}

    def __call__(self, x: Tensor) -> Tensor:
        y: Tensor = torch.ops.aten._weight_int8pack_mm(
            x.to(self.scale.dtype), self.qweight, self.scale
        )
        return y.to(x.dtype)

    def dequantized(self) -> Tensor:
        return self.qweight.float() * self.scale.float()[:, None]


class Int8DynamicLinear:
    """``w8a8``: Int8Linear's weights, and each input row quantized to int8 when the product
    runs (symmetric, one scale a row: a row's result never depends on the other rows of its
    batch), so the product is an integer one: oneDNN's quantized linear
    (``onednn.qlinear_pointwise``; VNNI or AMX where the CPU has them) on the matrix
    reordered once for it (``pack``). Its int32 sums are exact; the float result is
    ``sum(q_x q_w) * scale_w * scale_x``. About 3x ``_weight_int8pack_mm``'s speed at 64 rows
    (which is GEMV-like), level at one row (docs/ENGINE_PROFILE.md)."""

    def __init__(self, parts: Parts) -> None:
        self.qweight: Tensor | None = parts["qweight"]
        # a copy: once packed, nothing may hold the built-weights file's first mapping
        self.scale = parts["scale"].to(torch.float32, copy=True)
        self.out_features, self.in_features = parts["qweight"].shape
        self.prepacked: Tensor | None = None
        self.exact: Tensor | None = None  # the integer weights as float32, transposed (no VNNI)
        self._zeros = torch.zeros(self.out_features, dtype=torch.int64)
        self._one = torch.tensor(1.0)
        self._offset = torch.tensor(_U8_OFFSET, dtype=torch.int32)

    def pack(self) -> bool:
        """Reorder the matrix for oneDNN once and let go of the plain one. A CPU without
        VNNI (AVX2 only) has oneDNN sum u8 x s8 pairs in saturating 16-bit lanes, which is
        not exact: there the integer values are kept as float32 instead, whose products
        are exact integers while a sum stays below 2**24 (in any order, so a row's result
        is the same alone and in any batch)."""
        if self.prepacked is None and self.exact is None:
            if self.qweight is None or self.qweight.device.type != "cpu":
                raise ValueError("precision w8a8 runs on a CPU (oneDNN's quantized products)")
            if exact_int8_dots():
                self.prepacked = torch.ops.onednn.qlinear_prepack(self.qweight, None)
            else:
                self.exact = self.qweight.to(torch.float32).T.contiguous()
            self.qweight = None
        return True

    def __call__(self, x: Tensor) -> Tensor:
        self.pack()
        scale = x.abs().amax(-1, keepdim=True).clamp_(min=1e-12).div_(127)
        if self.exact is not None:
            product = torch.round(x.float() / scale) @ self.exact
            return product.mul_(self.scale).mul_(scale)
        # uint8 with the zero at 128, as oneDNN's quantized linear takes its input
        q = torch.round(x / scale).add_(_U8_OFFSET).to(torch.uint8)
        y: Tensor = torch.ops.onednn.qlinear_pointwise.tensor(
            q, self._one, self._offset, self.prepacked, self.scale, self._zeros,
            None, 1.0, 0, torch.float32, "none", [], "",
        )  # fmt: skip
        return y.mul_(scale)

    def dequantized(self) -> Tensor:
        """The product with the identity (each one-hot row quantizes exactly)."""
        return self(torch.eye(self.in_features)).T.contiguous()


_U8_OFFSET = 128
# the CPU's int8 dot products that oneDNN sums exactly (without them: vpmaddubsw, saturating)
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@functools.cache
def exact_int8_dots() -> bool:
    """Whether oneDNN's quantized products are exact on this CPU (it has VNNI or AMX)."""
    return bool(cpu_flags() & INT8_DOT_FLAGS)


class Int4Linear:
    """Asymmetric int4 in groups of ``INT4_GROUP`` inputs: w ≈ (q - 8) * scale + zero.
    The kernel packs rows in sixteens: a matrix of other heights gets zero rows added,
    and its products are cut back."""

    def __init__(self, parts: Parts) -> None:
        self.packed, self.scales_zeros = parts["packed"], parts["scales_zeros"]
        self.nibbles = parts["nibbles"]
        self.out_features = int(parts["rows"])
        self._cut = self.out_features != self.scales_zeros.shape[1]

    @staticmethod
    def quantize(weight: Tensor, dtype: torch.dtype) -> Parts:
        rows, cols = weight.shape
        if cols % INT4_GROUP:
            raise ValueError(f"int4 needs input sizes divisible by {INT4_GROUP}, not {cols}")
        padded = -(-rows // _INT4_ROWS) * _INT4_ROWS
        w = F.pad(weight.float(), (0, 0, 0, padded - rows)).view(padded, -1, INT4_GROUP)
        low, high = w.amin(-1), w.amax(-1)
        scale = (high - low).clamp(min=1e-6) / _INT4_MAX
        zero = low + scale * 8
        q = ((w - low[..., None]) / scale[..., None]).round().clamp(0, _INT4_MAX)
        q = q.to(torch.int32).view(padded, cols)
        return {
            "packed": torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1),
            "nibbles": _nibbles(q[:rows]),
            "scales_zeros": torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(dtype),
            "rows": torch.tensor(rows),
        }

    def __call__(self, x: Tensor) -> Tensor:
        y: Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(self.scales_zeros.dtype), self.packed, INT4_GROUP, self.scales_zeros
        )
        return (y[:, : self.out_features] if self._cut else y).to(x.dtype)

    def native_scales(self) -> tuple[Tensor, Tensor]:
        """float32 [rows, groups] scale and min, w = q * scale + min: as the native decode step
        (native/decode.c) reads them beside ``nibbles``."""
        scale, zero = self.scales_zeros[:, : self.out_features].float().unbind(-1)
        return scale.T.contiguous(), (zero - 8 * scale).T.contiguous()

    def dequantized(self) -> Tensor:
        """The product with the identity: each weight as the kernel sees it."""
        cols = self.scales_zeros.shape[0] * INT4_GROUP
        eye = torch.eye(cols, dtype=self.scales_zeros.dtype)
        return self(eye).float().T.contiguous()


def _nibbles(q: Tensor) -> Tensor:
    """int4 values [rows, cols] (0..15) two a byte, for the native decode step: in each group
    of 32, byte j holds value j (low half) and value j + 16 (high half)."""
    rows, cols = q.shape
    groups = q.view(rows, cols // INT4_GROUP, 2, INT4_GROUP // 2).to(torch.uint8)
    return (groups[:, :, 0] | (groups[:, :, 1] << 4)).reshape(rows, cols // 2).contiguous()


def quantize(weight: Tensor, precision: Precision) -> Parts:
    """``weight`` [out, in] (any float dtype) as ``precision`` holds it."""
    if precision in (Precision.INT8, Precision.W8A8):
        return Int8Linear.quantize(weight, precision.kernel_dtype)
    if precision is Precision.INT4:
        return Int4Linear.quantize(weight, precision.kernel_dtype)
    return {"weight": weight.to(precision.kernel_dtype).contiguous()}


def linear(parts: Parts, precision: Precision) -> Linear:
    """The matrix ``quantize`` gave ``parts`` for."""
    if precision is Precision.INT8:
        return Int8Linear(parts)
    if precision is Precision.W8A8:
        return Int8DynamicLinear(parts)
    if precision is Precision.INT4:
        return Int4Linear(parts)
    return DenseLinear(parts)


def make_linear(weight: Tensor, precision: Precision) -> Linear:
    """``weight`` [out, in] (any float dtype) held at ``precision``."""
    return linear(quantize(weight, precision), precision)
