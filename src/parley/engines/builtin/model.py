"""A Llama-family decoder in PyTorch that reads and writes a paged KV cache.

One forward pass serves a ragged batch: the new tokens of every scheduled
sequence are concatenated, so every projection and MLP is one matrix product for
the whole batch. Attention is per group: decoding sequences (one new token each)
are attended in one padded call; each prefill chunk attends over its own cached
prefix plus itself with a causal mask. K/V live in flat per-layer caches of
``num_blocks * block_size`` slots; a sequence's block table maps its positions to
slots. RMSNorm, RoPE (Hugging Face's rotate-half layout), grouped-query attention
and a SwiGLU MLP, as in Llama, SmolLM and friends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from parley.engines.builtin.config import ModelConfig


@dataclass(frozen=True, slots=True)
class PrefillItem:
    """A chunk of one sequence's prompt: rows ``[start, end)`` of the flat batch."""

    start: int
    end: int
    context_slots: Tensor  # slots of positions 0 .. (position of the chunk's last token)
    first_position: int


@dataclass(frozen=True, slots=True)
class BatchLayout:
    """Where each sequence's tokens sit in the flat batch, and where their K/V go."""

    positions: Tensor  # [T] int64
    slot_mapping: Tensor  # [T] int64: cache slot each new token's K/V is written to
    decode_rows: Tensor  # [B] int64: rows of the decoding sequences
    decode_slots: Tensor  # [B, L] int64: context slots of each decoding sequence (padded)
    decode_mask: Tensor  # [B, L] bool: which of decode_slots are real
    prefills: list[PrefillItem]
    logit_rows: Tensor  # [S] int64: rows whose next-token logits are wanted


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


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
        self.cos = emb.cos().to(dtype)
        self.sin = emb.sin().to(dtype)

    def apply(self, x: Tensor, positions: Tensor) -> Tensor:
        """x: [T, heads, dim]."""
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads = cfg.num_heads
        self.kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(
        self, x: Tensor, layout: BatchLayout, rotary: Rotary, k_cache: Tensor, v_cache: Tensor
    ) -> Tensor:
        t = x.shape[0]
        q = rotary.apply(self.q_proj(x).view(t, self.heads, self.head_dim), layout.positions)
        k = rotary.apply(self.k_proj(x).view(t, self.kv_heads, self.head_dim), layout.positions)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        k_cache[layout.slot_mapping] = k
        v_cache[layout.slot_mapping] = v
        out = torch.empty_like(q)
        if layout.decode_rows.numel():
            out[layout.decode_rows] = self._decode(q[layout.decode_rows], layout, k_cache, v_cache)
        for item in layout.prefills:
            out[item.start : item.end] = self._prefill(
                q[item.start : item.end], item, k_cache, v_cache
            )
        return self.o_proj(out.view(t, self.heads * self.head_dim))

    def _decode(self, q: Tensor, layout: BatchLayout, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """q: [B, H, D] → [B, H, D], one new token per sequence over its padded context."""
        keys = k_cache[layout.decode_slots].transpose(1, 2)  # [B, KVH, L, D]
        values = v_cache[layout.decode_slots].transpose(1, 2)
        mask = layout.decode_mask[:, None, None, :]  # [B, 1, 1, L]
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2), keys, values, attn_mask=mask, enable_gqa=True
        )
        return out.squeeze(2)

    def _prefill(self, q: Tensor, item: PrefillItem, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """q: [n, H, D] → [n, H, D]; each query sees the cached prefix and itself causally."""
        n = q.shape[0]
        keys = k_cache[item.context_slots].transpose(0, 1).unsqueeze(0)  # [1, KVH, L, D]
        values = v_cache[item.context_slots].transpose(0, 1).unsqueeze(0)
        total = keys.shape[2]
        q_pos = torch.arange(total - n, total, device=q.device)
        k_pos = torch.arange(total, device=q.device)
        mask = (k_pos[None, :] <= q_pos[:, None])[None, None]  # [1, 1, n, L]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), keys, values, attn_mask=mask, enable_gqa=True
        )
        return out.squeeze(0).transpose(0, 1)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, x: Tensor, layout: BatchLayout, rotary: Rotary, k_cache: Tensor, v_cache: Tensor
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), layout, rotary, k_cache, v_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaModel(nn.Module):
    """Parameter names follow Hugging Face's LlamaForCausalLM, so its weights load as they are."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.inference_mode()
    def forward(
        self,
        input_ids: Tensor,
        layout: BatchLayout,
        rotary: Rotary,
        kv_cache: list[tuple[Tensor, Tensor]],
    ) -> Tensor:
        """Logits [S, vocab] for ``layout.logit_rows``; K/V of every input token are cached."""
        x = self.model.embed_tokens(input_ids)
        for layer, (k_cache, v_cache) in zip(self.model.layers, kv_cache, strict=True):
            x = layer(x, layout, rotary, k_cache, v_cache)
        x = self.model.norm(x[layout.logit_rows])
        return self.lm_head(x).float()

    def load_weights(self, weights: dict[str, Tensor]) -> None:
        wanted = dict(self.state_dict())
        missing = [k for k in wanted if k not in weights and not self._tied(k)]
        if missing:
            raise ValueError(f"weights missing for {missing[:5]}")
        for name, tensor in weights.items():
            if name not in wanted:
                continue
            target = wanted[name]
            if target.shape != tensor.shape:
                raise ValueError(f"{name}: shape {tuple(tensor.shape)} != {tuple(target.shape)}")
            with torch.no_grad():
                target.copy_(tensor.to(target.dtype))

    def _tied(self, name: str) -> bool:
        return name == "lm_head.weight" and self.config.tie_word_embeddings


def allocate_kv_cache(
    cfg: ModelConfig, num_slots: int, device: torch.device, dtype: torch.dtype
) -> list[tuple[Tensor, Tensor]]:
    shape = (num_slots, cfg.num_kv_heads, cfg.head_dim)
    return [
        (
            torch.zeros(shape, device=device, dtype=dtype),
            torch.zeros(shape, device=device, dtype=dtype),
        )
        for _ in range(cfg.num_layers)
    ]
