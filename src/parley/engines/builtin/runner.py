"""The model runner: one step's batch laid out once, the forward pass, and the sampling.

As nano-vllm's ``ModelRunner``: the scheduler decides which tokens of which sequences go
into a step; the runner turns that plan into the batch's input tensors in one pass (token
ids, positions, cache slots, rotary angles, the decoding sequences' block tables and mask,
the prefill chunks' context blocks), runs the model over the paged KV cache it owns, and
samples every sequence's next token in one batched call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from parley.engines.builtin.block_manager import BlockManager
from parley.engines.builtin.grammar import Grammars
from parley.engines.builtin.logits import shape_logits
from parley.engines.builtin.model import (
    BatchLayout,
    KVCache,
    LlamaModel,
    PrefillItem,
    Rotary,
    allocate_kv_cache,
)
from parley.engines.builtin.sampler import Sampled, logprobs_of, sample_batch
from parley.engines.builtin.scheduler import Chunk
from parley.engines.builtin.sequence import Sequence


class ModelRunner:
    def __init__(
        self,
        model: LlamaModel,
        blocks: BlockManager,
        num_blocks: int,
        grammars: Grammars | None = None,
    ) -> None:
        self.model = model
        self.blocks = blocks
        self.block_size = blocks.block_size
        self.device, self.dtype = model.device, model.dtype
        self.kv_cache: KVCache = allocate_kv_cache(
            model.config, num_blocks, self.block_size, self.device, self.dtype
        )
        self.rotary = Rotary(model.config, self.device)
        self.generators: dict[str, torch.Generator] = {}
        self.grammars = grammars

    def forward(self, chunks: list[Chunk]) -> Tensor:
        """Logits [S, vocab] for the chunks that sample, in order."""
        layout, input_ids = self.layout(chunks)
        return self.model(input_ids, layout, self.kv_cache)

    def sample(self, logits: Tensor, seqs: list[Sequence]) -> tuple[list[int], dict[int, Sampled]]:
        """Each row's token, and the log probabilities of the rows that ask for them."""
        asked = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
        raw = torch.log_softmax(logits[asked], dim=-1) if asked else None
        shape_logits(logits, seqs)
        if self.grammars is not None:
            self.grammars.mask(logits, seqs)
        gens = [self.generators.get(s.seq_id) for s in seqs]
        tokens = sample_batch(logits, [s.params for s in seqs], gens)
        if self.grammars is not None:
            self.grammars.advance(seqs, tokens)
        if raw is None:
            return tokens, {}
        counts = [seqs[i].params.logprobs or 0 for i in asked]
        return tokens, logprobs_of(raw, asked, tokens, counts)

    def add(self, seq: Sequence) -> None:
        if seq.params.seed is not None:
            self.generators[seq.seq_id] = torch.Generator().manual_seed(seq.params.seed)
        if self.grammars is not None:
            self.grammars.add(seq)

    def reset(self, blocks: BlockManager) -> None:
        """New block tables (``EngineCore.reset``); no sequence's generator is kept."""
        self.blocks = blocks
        self.generators.clear()
        if self.grammars is not None:
            self.grammars.clear()

    def forget(self, seq: Sequence) -> None:
        self.generators.pop(seq.seq_id, None)
        if self.grammars is not None:
            self.grammars.forget(seq.seq_id)

    def layout(self, chunks: list[Chunk]) -> tuple[BatchLayout, Tensor]:
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[PrefillItem] = []
        logit_rows: list[int] = []
        bs = self.block_size
        for chunk in chunks:
            row, start, end = len(ids), chunk.start, chunk.start + chunk.count
            table = self.blocks.block_table(chunk.seq.seq_id)[: -(-end // bs)]
            ids += _tokens(chunk.seq, start, end)
            positions += range(start, end)
            slots += self.blocks.slots(chunk.seq.seq_id, start, end)
            if chunk.count == 1:
                decode_rows.append(row)
                decode_tables.append(table)
                decode_lens.append(end)
            else:
                blocks = torch.tensor(table, dtype=torch.long, device=self.device)
                prefills.append(PrefillItem(row, row + chunk.count, blocks, end))
            if chunk.sample:
                logit_rows.append(row + chunk.count - 1)
        return self._layout(
            ids, positions, slots, decode_rows, decode_tables, decode_lens, prefills, logit_rows
        )

    def _layout(
        self,
        ids: list[int],
        positions: list[int],
        slots: list[int],
        decode_rows: list[int],
        decode_tables: list[list[int]],
        decode_lens: list[int],
        prefills: list[PrefillItem],
        logit_rows: list[int],
    ) -> tuple[BatchLayout, Tensor]:
        dev, long = self.device, torch.long
        width = max((len(t) for t in decode_tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in decode_tables]
        pos = torch.tensor(positions, dtype=long, device=dev)
        if self.model.runs_natively(len(ids), not prefills):  # no mask, no rotations
            mask, rotation = torch.empty(0, 1, 1, 0, dtype=self.dtype), torch.empty(0)
        else:
            mask, rotation = self._mask(decode_lens, width), self.rotary.at(pos)
        layout = BatchLayout(
            slot_mapping=torch.tensor(slots, dtype=long, device=dev),
            positions=pos,
            rotation=rotation,
            decode_rows=torch.tensor(decode_rows, dtype=long, device=dev),
            decode_blocks=torch.tensor(padded, dtype=long, device=dev).view(len(padded), width),
            decode_mask=mask,
            prefills=prefills,
            logit_rows=torch.tensor(logit_rows, dtype=long, device=dev),
            all_decode=not prefills,
        )
        return layout, torch.tensor(ids, dtype=long, device=dev)

    def _mask(self, decode_lens: list[int], width: int) -> Tensor:
        """[B, 1, 1, width * block_size]: 0 where a decoding row's position is real, else -inf
        (additive, as SDPA would make a boolean mask on every call of every layer)."""
        dev = self.device
        lens = torch.tensor(decode_lens, dtype=torch.long, device=dev)
        padding = torch.arange(width * self.block_size, device=dev)[None, :] >= lens[:, None]
        mask = torch.zeros(padding.shape, dtype=self.dtype, device=dev)
        return mask.masked_fill_(padding, float("-inf"))[:, None, None, :]


def _tokens(seq: Sequence, start: int, end: int) -> list[int]:
    """``seq.tokens[start:end]`` without building the whole list (a decode takes one)."""
    n = len(seq.prompt)
    if end <= n:
        return seq.prompt[start:end]
    if start >= n:
        return seq.output[start - n : end - n]
    return seq.prompt[start:] + seq.output[: end - n]
