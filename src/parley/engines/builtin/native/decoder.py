"""The native decode step bound to one model: its tensors as C structs, one call a step.

``NativeDecoder.for_model`` reads the model's matrices as they are before packing (int8 rows
and their scales, int4 nibbles and their scales; fp32 matrices copied with their rows in fours,
``_in_groups``, as decode.c streams them), keeps references to them (so packing for oneDNN,
which replaces a dense matrix by its blocked copy, leaves this decoder its own), and lays out
the ``Model`` struct of decode.c. ``decode`` runs a step of decoding rows: the logits, and
every row's K/V written to the cache, in one foreign call (ctypes lets go of the GIL for it).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from parley.engines.builtin.linear import (
    INT4_GROUP,
    DenseLinear,
    Int4Linear,
    Int8DynamicLinear,
    Int8Linear,
    Linear,
)
from parley.engines.builtin.native.build import NativeUnavailable, load

if TYPE_CHECKING:
    from parley.engines.builtin.model import BatchLayout, KVCache, LlamaModel

_KIND_FP32, _KIND_INT8, _KIND_INT4, _KIND_W8A8 = 0, 1, 2, 3  # decode.c's KIND_*
_LANES = 32  # decode.c sums 2 x 16 floats at a time: input sizes must be multiples of it
_FP32_GROUP = 4  # decode.c's FP32_GROUP: fp32 rows are held in fours (_in_groups)

# Decode steps of more rows than this go to PyTorch, where its products are as fast or faster
# (bench/engine_profile.py --native both, docs/ENGINE_PROFILE.md): fp32 over 8 rows (oneDNN's
# packed products, whose answers are fp32's too; at 8 rows the native step's fours of rows
# took 37-44 ms against oneDNN's 45-49, at 16 a tie), w8a8 over 16 (oneDNN's integer products:
# the same exact sums). int8 and int4 stay native at every batch: PyTorch's kernels round
# their inputs to bf16, so switching by batch size would make answers depend on the batch.
MAX_ROWS = {_KIND_FP32: 8, _KIND_W8A8: 16}


class _Mat(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("rows", ctypes.c_int32),
        ("cols", ctypes.c_int32),
        ("pad", ctypes.c_int32),
        ("w", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("min", ctypes.c_void_p),
        ("wsum", ctypes.c_void_p),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("qkv", _Mat),
        ("o", _Mat),
        ("gate_up", _Mat),
        ("down", _Mat),
        ("attn_norm", ctypes.c_void_p),
        ("mlp_norm", ctypes.c_void_p),
    ]


_SIZES = (
    "hidden", "inter", "heads", "kv_heads", "head_dim", "vocab",
    "num_layers", "block_size", "threads", "pad",
)  # fmt: skip


class _Model(ctypes.Structure):
    _fields_ = [
        *[(name, ctypes.c_int32) for name in _SIZES],
        ("eps", ctypes.c_float),
        ("pad2", ctypes.c_float),
        ("embed", ctypes.c_void_p),
        ("norm", ctypes.c_void_p),
        ("rope", ctypes.c_void_p),
        ("layers", ctypes.POINTER(_Layer)),
        ("lm_head", _Mat),
    ]


@dataclass(slots=True)
class _Held:
    """What a struct points into: kept alive as long as the decoder is."""

    tensors: list[Tensor]

    def ptr(self, t: Tensor) -> int:
        if not t.is_contiguous():
            t = t.contiguous()
        self.tensors.append(t)
        return int(t.data_ptr())


class NativeDecoder:
    def __init__(self, lib: ctypes.CDLL, struct: _Model, held: _Held, layers: ctypes.Array) -> None:  # type: ignore[type-arg]
        self._lib, self._model, self._held, self._layers = lib, struct, held, layers
        self._fn = lib.parley_decode
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [
            ctypes.POINTER(_Model), ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        self.vocab = struct.vocab
        self.max_rows = MAX_ROWS.get(struct.lm_head.kind, 1 << 30)
        self._caches: tuple[int, ctypes.Array] | None = None  # type: ignore[type-arg]
        self._vectors = _Held([])  # the embedding and norms: rebind_vectors

    @classmethod
    def for_model(
        cls,
        model: LlamaModel,
        threads: int | None = None,
        cache_dir: Path | None = None,
        march: str = "native",
    ) -> NativeDecoder:
        """The decoder of ``model``'s tensors; NativeUnavailable when its precision, shapes or
        device are not the native step's, or the library cannot be built here."""
        cfg = model.config
        if model.device.type != "cpu":
            raise NativeUnavailable(f"the native decode step runs on a CPU, not {model.device}")
        held = _Held([])
        layers = (_Layer * cfg.num_layers)()
        for i, layer in enumerate(model.layers):
            layers[i] = _Layer(
                _mat(layer.attn.qkv, held),
                _mat(layer.attn.o_proj, held),
                _mat(layer.mlp.gate_up, held),
                _mat(layer.mlp.down, held),
            )
        rope = torch.view_as_real(_rotations(model)).contiguous()
        struct = _Model(
            cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads,
            cfg.head_dim, cfg.vocab_size, cfg.num_layers, 0,
            threads or torch.get_num_threads(), 0, cfg.rms_norm_eps, 0.0,
            None, None, held.ptr(rope),
            ctypes.cast(layers, ctypes.POINTER(_Layer)), _mat(model.lm_head, held),
        )  # fmt: skip
        decoder = cls(load(cache_dir, march), struct, held, layers)
        decoder.rebind_vectors(model)
        return decoder

    def rebind_vectors(self, model: LlamaModel) -> None:
        """Read the embedding and the norms from ``model``'s tensors as they are now. Called
        again by ``LlamaModel.pack_weights`` once it has let go of the weights file's first
        mapping, which a pointer kept here would hold resident (its pages all read)."""
        vectors = _Held([])
        self._model.embed = vectors.ptr(model.embed.float())
        self._model.norm = vectors.ptr(model.norm.float())
        for i, layer in enumerate(model.layers):
            self._layers[i].attn_norm = vectors.ptr(layer.attn_norm.float())
            self._layers[i].mlp_norm = vectors.ptr(layer.mlp_norm.float())
        self._vectors = vectors

    def decode(self, input_ids: Tensor, layout: BatchLayout, kv_cache: KVCache) -> Tensor:
        """Logits [n, vocab] float32 of a step whose n rows all decode (``layout.all_decode``),
        each row's K/V written to its slot of ``kv_cache``."""
        n = int(input_ids.shape[0])
        block_size = int(kv_cache[0].shape[1])
        self._model.block_size = block_size
        tables = layout.decode_blocks.contiguous()
        positions = layout.positions.contiguous()
        slots = layout.slot_mapping.contiguous()
        ids = input_ids.contiguous()
        logits = torch.empty(n, self.vocab, dtype=torch.float32)
        done = self._fn(
            ctypes.byref(self._model), n, ids.data_ptr(), positions.data_ptr(),
            slots.data_ptr(), tables.data_ptr(), int(tables.shape[1]),
            ctypes.addressof(self._cache_pointers(kv_cache)), logits.data_ptr(),
        )  # fmt: skip
        if done != 0:
            raise MemoryError("the native decode step could not have its scratch memory")
        return logits

    def _cache_pointers(self, kv_cache: KVCache) -> ctypes.Array:  # type: ignore[type-arg]
        key = kv_cache[0].data_ptr()
        if self._caches is None or self._caches[0] != key:
            if any(c.dtype != torch.float32 or not c.is_contiguous() for c in kv_cache):
                raise NativeUnavailable("the native decode step reads a float32 KV cache")
            ptrs = (ctypes.c_void_p * len(kv_cache))(*(c.data_ptr() for c in kv_cache))
            self._caches = (key, ptrs)
        return self._caches[1]


def _rotations(model: LlamaModel) -> Tensor:
    from parley.engines.builtin.model import Rotary

    return Rotary(model.config, model.device).table  # [max_pos, D/2] complex64


def _mat(linear: Linear, held: _Held) -> _Mat:
    """decode.c's view of a matrix as the model holds it before packing."""
    if isinstance(linear, DenseLinear) and not linear.packed:
        weight = linear.weight
        if weight.dtype != torch.float32:
            raise NativeUnavailable(f"the native decode step has no {weight.dtype} products")
        rows, cols = weight.shape
        _check_cols(cols, _LANES)
        return _Mat(_KIND_FP32, rows, cols, 0, held.ptr(_in_groups(weight)), None, None, None)
    if isinstance(linear, Int8Linear):
        rows, cols = linear.qweight.shape
        _check_cols(cols, _LANES)
        scale = linear.scale.to(torch.float32, copy=True)
        return _Mat(
            _KIND_INT8, rows, cols, 0, held.ptr(linear.qweight), held.ptr(scale), None, None
        )
    if isinstance(linear, Int4Linear):
        rows, half = linear.nibbles.shape
        _check_cols(half * 2, INT4_GROUP)
        scale, minimum = linear.native_scales()
        return _Mat(
            _KIND_INT4, rows, half * 2, 0,
            held.ptr(linear.nibbles), held.ptr(scale), held.ptr(minimum), None,
        )  # fmt: skip
    if isinstance(linear, Int8DynamicLinear) and linear.qweight is not None:
        q = linear.qweight
        rows, cols = q.shape
        wsum = q.sum(1, dtype=torch.int32)
        return _Mat(
            _KIND_W8A8, rows, cols, 0,
            held.ptr(q), held.ptr(linear.scale), None, held.ptr(wsum),
        )  # fmt: skip
    raise NativeUnavailable(f"the native decode step has no product for {type(linear).__name__}")


def _in_groups(weight: Tensor) -> Tensor:
    """An fp32 matrix as decode.c reads it: its rows in fours (the last four padded with
    zeros), each 32-column chunk of the four rows together: ``[rows/4, cols/32, 4, 32]``."""
    rows, cols = weight.shape
    pad = -rows % _FP32_GROUP
    if pad:
        weight = torch.cat([weight, weight.new_zeros(pad, cols)])
    grouped = weight.view(-1, _FP32_GROUP, cols // _LANES, _LANES).transpose(1, 2)
    return grouped.contiguous()


def _check_cols(cols: int, multiple: int) -> None:
    if cols % multiple:
        raise NativeUnavailable(f"the native decode step needs inputs divisible by {multiple}")
