"""A Llama-family decoder in PyTorch that reads and writes a paged KV cache.

One forward pass serves a ragged batch: the new tokens of every scheduled sequence are
concatenated, so every projection and MLP is one matrix product for the whole batch (q, k
and v in one product, gate and up in another). Attention is per group: decoding sequences
(one new token each) are attended in one padded call over their blocks; each prefill chunk
attends over its own cached prefix plus itself with a causal mask. K/V live in one cache a
layer, ``[num_blocks, block_size, 2 * kv_heads, head_dim]`` (a slot's K heads, then its V
heads, as the fused product lays them out), so one copy writes a step's K and V and one
gather reads a sequence's blocks; a sequence's block table lists its blocks. RMSNorm, RoPE,
grouped-query attention and a SwiGLU MLP, as in Llama, SmolLM and friends. The q and k rows
of each head are held with each rotated pair adjacent (as llama.cpp's GGUF files hold them,
not Hugging Face's rotate-half halves), so RoPE is one complex multiply, in place on the
product's output. Weights are held at a ``Precision`` (``linear.py``); the model is built
from Hugging Face-named weights, never initialised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from parley.engines.builtin.config import ModelConfig
from parley.engines.builtin.linear import (
    DenseLinear,
    Int8DynamicLinear,
    Linear,
    Parts,
    linear,
    quantize,
)
from parley.engines.builtin.precision import Precision

Built = dict[str, Tensor]  # the model's tensors as held: see build_weights()
KVCache = list[Tensor]  # per layer: [num_blocks, block_size, 2 * KVH, D], K heads then V heads


class NativeStep(Protocol):
    """A decode step run outside PyTorch (``native.decoder.NativeDecoder``): the model
    hands it the steps whose rows all decode, up to ``max_rows`` of them."""

    max_rows: int

    def decode(self, input_ids: Tensor, layout: BatchLayout, kv_cache: KVCache) -> Tensor: ...

    def rebind_vectors(self, model: LlamaModel) -> None: ...


@dataclass(frozen=True, slots=True)
class PrefillItem:
    """A chunk of one sequence's prompt: rows ``[start, end)`` of the flat batch."""

    start: int
    end: int
    context_blocks: Tensor  # [nb] int64: blocks holding positions 0 .. the chunk's last
    context_len: int  # positions 0 .. context_len-1 are attended (the chunk's end)


@dataclass(frozen=True, slots=True)
class BatchLayout:
    """Where each sequence's tokens sit in the flat batch, and where their K/V go."""

    slot_mapping: Tensor  # [T] int64: cache slot each new token's K/V is written to
    positions: Tensor  # [T] int64: each row's position in its sequence
    rotation: Tensor  # [T, 1, D/2] complex: e^(i·angle) of each row's position, per pair
    decode_rows: Tensor  # [B] int64: rows of the decoding sequences
    decode_blocks: Tensor  # [B, NB] int64: block table of each decoding sequence (padded)
    decode_mask: Tensor  # [B, 1, 1, NB * block_size]: 0 where a position is real, else -inf
    prefills: list[PrefillItem]
    logit_rows: Tensor  # [S] int64: rows whose next-token logits are wanted
    all_decode: bool  # every row is a decode row, in order (no gather/scatter needed)


class Rotary:
    """The rotations of every position: ``e^(i·t·θ_j)`` for each pair j of a head's dims."""

    def __init__(self, cfg: ModelConfig, device: torch.device) -> None:
        dim = cfg.head_dim
        inv_freq = 1.0 / (
            cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)
        )
        t = torch.arange(cfg.max_position_embeddings, dtype=torch.float64, device=device)
        angles = torch.outer(t, inv_freq)
        self.table = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)

    def at(self, positions: Tensor) -> Tensor:
        """[T, 1, D/2]: each row's rotations, shaped to broadcast over heads."""
        return self.table[positions].unsqueeze(1)


def rope_(qk: Tensor, layout: BatchLayout) -> None:
    """Rotate qk [T, heads, D] in place: each adjacent pair of dims is a complex number."""
    t, heads, d = qk.shape
    torch.view_as_complex(qk.view(t, heads, d // 2, 2)).mul_(layout.rotation)


def interleave_rope(weight: Tensor, heads: int) -> Tensor:
    """Hugging Face's q/k rows (each head's dims as two halves rotated together, rotate-half)
    reordered so each rotated pair is adjacent (llama.cpp's order, convert_hf_to_gguf's
    ``permute``). q·k is unchanged: q and k are reordered alike."""
    rows = weight.shape[0]
    halves = weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
    return halves.transpose(1, 2).reshape(weight.shape)


class Attention:
    def __init__(self, cfg: ModelConfig, w: Built, precision: Precision) -> None:
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.group = cfg.num_heads // cfg.num_kv_heads
        self.qk_width = (self.heads + self.kv_heads) * self.head_dim
        self.qkv = linear(_parts(w, "qkv"), precision)
        self.o_proj = linear(_parts(w, "o"), precision)

    def __call__(self, x: Tensor, layout: BatchLayout, cache: Tensor) -> Tensor:
        t, d = x.shape[0], self.head_dim
        qkv = self.qkv(x)
        rope_(qkv[:, : self.qk_width].view(t, self.heads + self.kv_heads, d), layout)
        q = qkv[:, : self.heads * d].view(t, self.heads, d)
        kv = qkv[:, self.heads * d :].view(t, 2 * self.kv_heads, d)
        cache.view(-1, 2 * self.kv_heads, d).index_copy_(0, layout.slot_mapping, kv)
        if layout.all_decode:
            out = self._decode(q, layout, cache)
        else:
            out = torch.empty_like(q)
            if layout.decode_rows.numel():
                rows = layout.decode_rows
                out[rows] = self._decode(q[rows], layout, cache)
            for item in layout.prefills:
                out[item.start : item.end] = self._prefill(q[item.start : item.end], item, cache)
        return self.o_proj(out.reshape(t, self.heads * d))

    def _decode(self, q: Tensor, layout: BatchLayout, cache: Tensor) -> Tensor:
        """q: [B, H, D] → [B, H, D], one new token per sequence over its blocks. The query
        heads sharing a K/V head attend as that head's G queries: no K/V is repeated."""
        b, d, kvh = q.shape[0], self.head_dim, self.kv_heads
        blocks = layout.decode_blocks.view(-1)  # index_select copies whole blocks
        kv = cache.index_select(0, blocks).view(b, -1, 2 * kvh, d).transpose(1, 2)
        keys, values = kv[:, :kvh], kv[:, kvh:]  # [B, KVH, L, D]
        grouped = q.view(b, kvh, self.group, d)
        out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=layout.decode_mask)
        return out.view(b, self.heads, d)

    def _prefill(self, q: Tensor, item: PrefillItem, cache: Tensor) -> Tensor:
        """q: [n, H, D] → [n, H, D]; each query sees the cached prefix and itself causally."""
        n, total, d, kvh = q.shape[0], item.context_len, self.head_dim, self.kv_heads
        kv = cache.index_select(0, item.context_blocks).view(-1, 2 * kvh, d)[:total]
        keys, values = kv[:, :kvh], kv[:, kvh:]
        q_pos = torch.arange(total - n, total, device=q.device)
        k_pos = torch.arange(total, device=q.device)
        mask = (k_pos[None, :] <= q_pos[:, None])[None, None]  # [1, 1, n, L]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            attn_mask=mask,
            enable_gqa=True,
        )
        return out.squeeze(0).transpose(0, 1)


class MLP:
    def __init__(self, w: Built, precision: Precision) -> None:
        self.gate_up = linear(_parts(w, "gate_up"), precision)
        self.down = linear(_parts(w, "down"), precision)

    def __call__(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class DecoderLayer:
    def __init__(self, cfg: ModelConfig, w: Built, precision: Precision) -> None:
        self.attn = Attention(cfg, w, precision)
        self.mlp = MLP(w, precision)
        self.attn_norm, self.mlp_norm = w["attn_norm"], w["mlp_norm"]
        self.norm_shape, self.eps = (cfg.hidden_size,), cfg.rms_norm_eps

    def __call__(self, x: Tensor, layout: BatchLayout, cache: Tensor) -> Tensor:
        x = x + self.attn(F.rms_norm(x, self.norm_shape, self.attn_norm, self.eps), layout, cache)
        return x + self.mlp(F.rms_norm(x, self.norm_shape, self.mlp_norm, self.eps))


class LlamaModel:
    """Wired from ``build_weights``' tensors (fused, at ``precision``); ``from_hf`` builds them."""

    def __init__(
        self,
        cfg: ModelConfig,
        built: Built,
        precision: Precision = Precision.FP32,
        device: torch.device | None = None,
    ) -> None:
        self.config, self.precision = cfg, precision
        self.device = device or torch.device("cpu")
        self.dtype = precision.activation_dtype
        on = {k: v.to(self.device) for k, v in built.items()}
        self.embed, self.norm = on["embed"], on["norm"]
        self.layers = [
            DecoderLayer(cfg, _prefixed(on, f"layers.{i}."), precision)
            for i in range(cfg.num_layers)
        ]
        head = _parts(on, "lm_head") or {"weight": self.embed}  # tied and dense: the same
        self.lm_head: Linear = linear(head, precision)
        # the native decode step (native/mode.py's use_native gives it, before packing)
        self.native: NativeStep | None = None

    def pack_weights(self, mapped_again: Callable[[], Built | None] | None = None) -> int:
        """Hand every dense (and w8a8) matrix to oneDNN for its packed products
        (``DenseLinear.pack``, ``Int8DynamicLinear.pack``); how many it took. The other
        quantized matrices have their own packed kernels already.

        The embedding and the norms are still read from the built tensors. When those come
        from the memory-mapped cache file, its pages were all read once to pack and would
        stay resident beside the packed copies. So when any matrix was packed, the model
        lets go of them: it takes the tensors from ``mapped_again`` (a fresh mapping of
        the same file, whose pages are resident only once read: an embedding row a token)
        or, without one, copies them out."""
        matrices: list[Linear] = [self.lm_head]
        for layer in self.layers:
            matrices += [layer.attn.qkv, layer.attn.o_proj, layer.mlp.gate_up, layer.mlp.down]
        packed = sum(m.pack() for m in matrices if isinstance(m, DenseLinear | Int8DynamicLinear))
        if packed:
            self._let_go_of_built(mapped_again() if mapped_again is not None else None)
        return packed

    def _let_go_of_built(self, fresh: Built | None) -> None:
        def own(name: str, tensor: Tensor) -> Tensor:
            return tensor.clone() if fresh is None else fresh[name].to(self.device)

        self.embed, self.norm = own("embed", self.embed), own("norm", self.norm)
        for i, layer in enumerate(self.layers):
            layer.attn_norm = own(f"layers.{i}.attn_norm", layer.attn_norm)
            layer.mlp_norm = own(f"layers.{i}.mlp_norm", layer.mlp_norm)
        if self.native is not None:  # it read them too: now these, not the first mapping's
            self.native.rebind_vectors(self)

    @classmethod
    def from_hf(
        cls,
        cfg: ModelConfig,
        weights: dict[str, Tensor],
        precision: Precision = Precision.FP32,
        device: torch.device | None = None,
    ) -> LlamaModel:
        """From Hugging Face LlamaForCausalLM-named float weights."""
        return cls(cfg, build_weights(cfg, weights, precision), precision, device)

    def runs_natively(self, rows: int, all_decode: bool) -> bool:
        """Whether a step of ``rows`` rows goes to the native decode step: every row decodes,
        and there are no more than the native step's ``max_rows`` (it reads the layout's block
        tables, positions and slots, not its mask or rotations)."""
        return self.native is not None and all_decode and rows <= self.native.max_rows

    @torch.inference_mode()
    def __call__(self, input_ids: Tensor, layout: BatchLayout, kv_cache: KVCache) -> Tensor:
        """Logits [S, vocab] (float32) for ``layout.logit_rows``; every input's K/V is cached."""
        native = self.native
        if native is not None and self.runs_natively(input_ids.shape[0], layout.all_decode):
            logits = native.decode(input_ids, layout, kv_cache)
            same_rows = logits.shape[0] == layout.logit_rows.shape[0]
            return logits if same_rows else logits[layout.logit_rows]
        x = F.embedding(input_ids, self.embed)
        for layer, cache in zip(self.layers, kv_cache, strict=True):
            x = layer(x, layout, cache)
        if not (layout.all_decode and x.shape[0] == layout.logit_rows.shape[0]):
            x = x[layout.logit_rows]
        x = F.rms_norm(x, (self.config.hidden_size,), self.norm, self.config.rms_norm_eps)
        return self.lm_head(x).float()


def build_weights(cfg: ModelConfig, weights: dict[str, Tensor], precision: Precision) -> Built:
    """The tensors the model holds, from Hugging Face-named float weights: q/k/v and gate/up
    fused (q and k rows reordered for ``rope_``: ``interleave_rope``), every matrix at
    ``precision`` (``linear.quantize``), the rest in its activation dtype. Names: ``embed``,
    ``norm``, ``lm_head.<part>`` (none when tied and dense), and per layer ``layers.<i>.`` +
    ``qkv.``/``o.``/``gate_up.``/``down.<part>``, ``attn_norm``, ``mlp_norm``. What it returns
    is what the built-weights cache stores."""
    dtype = precision.activation_dtype
    built: Built = {
        "embed": weights["model.embed_tokens.weight"].to(dtype),
        "norm": weights["model.norm.weight"].to(dtype),
    }
    if not cfg.tie_word_embeddings:
        built |= _named("lm_head", quantize(weights["lm_head.weight"], precision))
    elif precision.quantized or precision.kernel_dtype != dtype:
        built |= _named("lm_head", quantize(built["embed"], precision))
    for i in range(cfg.num_layers):
        hf = f"model.layers.{i}."
        w = {k[len(hf) : -len(".weight")]: v for k, v in weights.items() if k.startswith(hf)}
        q = interleave_rope(w["self_attn.q_proj"], cfg.num_heads)
        k = interleave_rope(w["self_attn.k_proj"], cfg.num_kv_heads)
        matrices = {
            "qkv": torch.cat([q, k, w["self_attn.v_proj"]]),
            "o": w["self_attn.o_proj"],
            "gate_up": torch.cat([w["mlp.gate_proj"], w["mlp.up_proj"]]),
            "down": w["mlp.down_proj"],
        }
        for name, matrix in matrices.items():
            built |= _named(f"layers.{i}.{name}", quantize(matrix, precision))
        built[f"layers.{i}.attn_norm"] = w["input_layernorm"].to(dtype)
        built[f"layers.{i}.mlp_norm"] = w["post_attention_layernorm"].to(dtype)
    return built


def _named(prefix: str, parts: Parts) -> Built:
    return {f"{prefix}.{k}": v for k, v in parts.items()}


def _parts(built: Built, name: str) -> Parts:
    return _prefixed(built, f"{name}.")


def _prefixed(built: Built, prefix: str) -> Built:
    return {k[len(prefix) :]: v for k, v in built.items() if k.startswith(prefix)}


def allocate_kv_cache(
    cfg: ModelConfig, num_blocks: int, block_size: int, device: torch.device, dtype: torch.dtype
) -> KVCache:
    """Zeroed K/V caches, one a layer, whose pages the OS hands out only when first written (on
    the CPU through calloc), so a large cache costs memory only as it fills."""
    shape = (num_blocks, block_size, 2 * cfg.num_kv_heads, cfg.head_dim)
    return [_zeros(shape, device, dtype) for _ in range(cfg.num_layers)]


def _zeros(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> Tensor:
    if device.type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype)
    raw = np.zeros(shape, dtype=np.uint16 if dtype.itemsize == 2 else np.float32)
    return torch.from_numpy(raw).view(dtype)
