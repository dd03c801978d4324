"""A Llama-family decoder in PyTorch that reads and writes a paged KV cache.

One forward pass serves a ragged batch: the new tokens of every scheduled sequence are
concatenated, so every projection and MLP is one matrix product for the whole batch (q, k
and v in one product, gate and up in another). Attention is per group: decoding sequences
(one new token each) are attended in one padded call over their blocks; each prefill chunk
attends over its own cached prefix plus itself with a causal mask. K/V live in per-layer
caches of ``[num_blocks, block_size, kv_heads, head_dim]``; a sequence's block table lists
its blocks. RMSNorm, RoPE (Hugging Face's rotate-half layout), grouped-query attention and a
SwiGLU MLP, as in Llama, SmolLM and friends. Weights are held at a ``Precision``
(``linear.py``); the model is built from Hugging Face-named weights, never initialised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from parley.engines.builtin.config import ModelConfig
from parley.engines.builtin.linear import DenseLinear, Linear, Parts, linear, quantize
from parley.engines.builtin.precision import Precision

Built = dict[str, Tensor]  # the model's tensors as held: see build_weights()
KVCache = list[tuple[Tensor, Tensor]]  # per layer: K and V, [num_blocks, block_size, KVH, D]


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
    cos: Tensor  # [T, 1, D] rotary angles of each row's position
    sin: Tensor  # [T, 1, D] (sign folded in: rotate-half is a roll by D/2 times this)
    decode_rows: Tensor  # [B] int64: rows of the decoding sequences
    decode_blocks: Tensor  # [B, NB] int64: block table of each decoding sequence (padded)
    decode_mask: Tensor  # [B, 1, 1, NB * block_size] bool: which positions are real
    prefills: list[PrefillItem]
    logit_rows: Tensor  # [S] int64: rows whose next-token logits are wanted
    all_decode: bool  # every row is a decode row, in order (no gather/scatter needed)


class Rotary:
    """cos/sin tables for every position, in Hugging Face's rotate-half layout."""

    def __init__(self, cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> None:
        dim = cfg.head_dim
        inv_freq = 1.0 / (
            cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)
        )
        t = torch.arange(cfg.max_position_embeddings, dtype=torch.float64, device=device)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        sign = torch.cat((-torch.ones(dim // 2), torch.ones(dim // 2))).to(device)
        self.cos = emb.cos().to(dtype)
        self.sin = (emb.sin() * sign).to(dtype)

    def at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and signed sin for ``positions``, shaped [T, 1, D] to broadcast over heads."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


def rope(x: Tensor, layout: BatchLayout) -> Tensor:
    """x: [T, heads, D]; rotate-half(x) is x rolled by D/2 with the first half negated."""
    return x * layout.cos + x.roll(x.shape[-1] // 2, -1) * layout.sin


class Attention:
    def __init__(self, cfg: ModelConfig, w: Built, precision: Precision) -> None:
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.group = cfg.num_heads // cfg.num_kv_heads
        self.qk_width = (self.heads + self.kv_heads) * self.head_dim
        self.qkv = linear(_parts(w, "qkv"), precision)
        self.o_proj = linear(_parts(w, "o"), precision)

    def __call__(self, x: Tensor, layout: BatchLayout, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        t, d = x.shape[0], self.head_dim
        qkv = self.qkv(x)
        qk = rope(qkv[:, : self.qk_width].view(t, self.heads + self.kv_heads, d), layout)
        q, k = qk[:, : self.heads], qk[:, self.heads :]
        v = qkv[:, self.qk_width :].view(t, self.kv_heads, d)
        k_cache.view(-1, self.kv_heads, d).index_copy_(0, layout.slot_mapping, k)
        v_cache.view(-1, self.kv_heads, d).index_copy_(0, layout.slot_mapping, v)
        if layout.all_decode:
            out = self._decode(q, layout, k_cache, v_cache)
        else:
            out = torch.empty_like(q)
            if layout.decode_rows.numel():
                rows = layout.decode_rows
                out[rows] = self._decode(q[rows], layout, k_cache, v_cache)
            for item in layout.prefills:
                out[item.start : item.end] = self._prefill(
                    q[item.start : item.end], item, k_cache, v_cache
                )
        return self.o_proj(out.reshape(t, self.heads * d))

    def _decode(self, q: Tensor, layout: BatchLayout, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """q: [B, H, D] → [B, H, D], one new token per sequence over its blocks. The query
        heads sharing a K/V head attend as that head's G queries: no K/V is repeated."""
        b, d = q.shape[0], self.head_dim
        shape = (b, -1, self.kv_heads, d)
        blocks = layout.decode_blocks.view(-1)  # index_select copies whole blocks
        keys = k_cache.index_select(0, blocks).view(shape).transpose(1, 2)  # [B, KVH, L, D]
        values = v_cache.index_select(0, blocks).view(shape).transpose(1, 2)
        grouped = q.view(b, self.kv_heads, self.group, d)
        out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=layout.decode_mask)
        return out.view(b, self.heads, d)

    def _prefill(self, q: Tensor, item: PrefillItem, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """q: [n, H, D] → [n, H, D]; each query sees the cached prefix and itself causally."""
        n, total, d = q.shape[0], item.context_len, self.head_dim
        keys = k_cache.index_select(0, item.context_blocks).view(-1, self.kv_heads, d)[:total]
        values = v_cache.index_select(0, item.context_blocks).view(-1, self.kv_heads, d)[:total]
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

    def __call__(self, x: Tensor, layout: BatchLayout, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        normed = F.rms_norm(x, self.norm_shape, self.attn_norm, self.eps)
        x = x + self.attn(normed, layout, k_cache, v_cache)
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

    def pack_weights(self, mapped_again: Callable[[], Built | None] | None = None) -> int:
        """Hand every dense matrix to oneDNN for its packed products (``DenseLinear.pack``);
        how many it took. Quantized matrices have their own packed kernels already.

        The embedding and the norms are still read from the built tensors. When those come
        from the memory-mapped cache file, its pages were all read once to pack and would
        stay resident beside the packed copies. So when any matrix was packed, the model
        lets go of them: it takes the tensors from ``mapped_again`` (a fresh mapping of
        the same file, whose pages are resident only once read: an embedding row a token)
        or, without one, copies them out."""
        matrices: list[Linear] = [self.lm_head]
        for layer in self.layers:
            matrices += [layer.attn.qkv, layer.attn.o_proj, layer.mlp.gate_up, layer.mlp.down]
        packed = sum(m.pack() for m in matrices if isinstance(m, DenseLinear))
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

    @torch.inference_mode()
    def __call__(self, input_ids: Tensor, layout: BatchLayout, kv_cache: KVCache) -> Tensor:
        """Logits [S, vocab] (float32) for ``layout.logit_rows``; every input's K/V is cached."""
        x = F.embedding(input_ids, self.embed)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_cache, strict=True):
            x = layer(x, layout, k_cache, v_cache)
        if not (layout.all_decode and x.shape[0] == layout.logit_rows.shape[0]):
            x = x[layout.logit_rows]
        x = F.rms_norm(x, (self.config.hidden_size,), self.norm, self.config.rms_norm_eps)
        return self.lm_head(x).float()


def build_weights(cfg: ModelConfig, weights: dict[str, Tensor], precision: Precision) -> Built:
    """The tensors the model holds, from Hugging Face-named float weights: q/k/v and gate/up
    fused, every matrix at ``precision`` (``linear.quantize``), the rest in its activation
    dtype. Names: ``embed``, ``norm``, ``lm_head.<part>`` (none when tied and dense), and per
    layer ``layers.<i>.`` + ``qkv.``/``o.``/``gate_up.``/``down.<part>``, ``attn_norm``,
    ``mlp_norm``. What it returns is what the built-weights cache stores."""
    dtype = precision.activation_dtype
    built: Built = {
        "embed": weights["model.embed_tokens.weight"].to(dtype),
        "norm": weights["model.norm.weight"].to(dtype),
    }
    if not cfg.tie_word_embeddings:
        built |= _named("lm_head", quantize(weights["lm_head.weight"], precision))
    elif precision.kernel_dtype != dtype:
        built |= _named("lm_head", quantize(built["embed"], precision))
    for i in range(cfg.num_layers):
        hf = f"model.layers.{i}."
        w = {k[len(hf) : -len(".weight")]: v for k, v in weights.items() if k.startswith(hf)}
        matrices = {
            "qkv": torch.cat([w["self_attn.q_proj"], w["self_attn.k_proj"], w["self_attn.v_proj"]]),
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
    """Zeroed K/V caches whose pages the OS hands out only when first written (on the CPU
    through calloc), so a large cache costs memory only as it fills."""
    shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
    return [
        (_zeros(shape, device, dtype), _zeros(shape, device, dtype)) for _ in range(cfg.num_layers)
    ]


def _zeros(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> Tensor:
    if device.type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype)
    raw = np.zeros(shape, dtype=np.uint16 if dtype.itemsize == 2 else np.float32)
    return torch.from_numpy(raw).view(dtype)
