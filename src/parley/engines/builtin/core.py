"""The engine core: one scheduler step at a time.

``EngineCore.step()`` asks the scheduler for a batch, lays it out for the model,
runs one forward pass, samples, and reports each sequence's new token. The
``EngineLoop`` thread (loop.py) feeds it requests and aborts from other threads and
calls it while there is work, so the asyncio event loop never waits on a forward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from parley.engines.builtin.block_manager import BlockManager
from parley.engines.builtin.model import (
    BatchLayout,
    LlamaModel,
    PrefillItem,
    Rotary,
    allocate_kv_cache,
)
from parley.engines.builtin.sampler import sample
from parley.engines.builtin.scheduler import Chunk, Scheduler
from parley.engines.builtin.sequence import Sequence
from parley.engines.interface import FinishReason


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A sequence produced ``token`` (None when it ended without one, e.g. aborted)."""

    seq: Sequence
    token: int | None
    finish: FinishReason | None


@dataclass(frozen=True, slots=True)
class StepStats:
    batch_tokens: int
    batch_sequences: int
    seconds: float


class EngineCore:
    def __init__(
        self,
        model: LlamaModel,
        *,
        num_blocks: int,
        block_size: int = 16,
        max_batch_tokens: int = 512,
        max_running: int = 64,
        eos_token_ids: tuple[int, ...] = (),
    ) -> None:
        cfg = model.config
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.model = model
        self.block_size = block_size
        self.blocks = BlockManager(num_blocks, block_size)
        self.scheduler = Scheduler(
            self.blocks, max_batch_tokens=max_batch_tokens, max_running=max_running
        )
        self.kv_cache = allocate_kv_cache(cfg, num_blocks * block_size, self.device, self.dtype)
        self.rotary = Rotary(cfg, self.device, self.dtype)
        self.eos = set(eos_token_ids)
        self.generators: dict[str, torch.Generator] = {}
        self.last_step: StepStats | None = None

    def add(self, seq: Sequence) -> None:
        if seq.params.seed is not None:
            self.generators[seq.seq_id] = torch.Generator().manual_seed(seq.params.seed)
        self.scheduler.add(seq)

    def abort(self, seq: Sequence) -> None:
        self._retire(seq)

    def step(self) -> list[TokenEvent]:
        started = time.perf_counter()
        plan = self.scheduler.schedule()
        events = [TokenEvent(s, None, FinishReason.LENGTH) for s in plan.too_long]
        for seq in plan.too_long:
            self._retire(seq)
        if not plan.chunks:
            return events
        logits = self._forward(plan.chunks)
        row = 0
        for chunk in plan.chunks:
            self.scheduler.computed(chunk)
            if chunk.sample:
                events.append(self._advance(chunk.seq, logits[row]))
                row += 1
        self.last_step = StepStats(
            plan.num_tokens, len({c.seq.seq_id for c in plan.chunks}), time.perf_counter() - started
        )
        return events

    def _advance(self, seq: Sequence, logits: Tensor) -> TokenEvent:
        token = sample(logits, seq.params, self.generators.get(seq.seq_id))
        seq.output.append(token)
        finish = None
        if token in self.eos:
            finish = FinishReason.STOP
        elif len(seq.output) >= seq.params.max_tokens:
            finish = FinishReason.LENGTH
        if finish is not None:
            self._retire(seq)
        return TokenEvent(seq, token, finish)

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self.generators.pop(seq.seq_id, None)

    def _forward(self, chunks: list[Chunk]) -> Tensor:
        layout, input_ids = self._layout(chunks)
        return self.model(input_ids, layout, self.rotary, self.kv_cache)

    def _layout(self, chunks: list[Chunk]) -> tuple[BatchLayout, Tensor]:
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_rows: list[int] = []
        decode_ctx: list[list[int]] = []
        prefills: list[PrefillItem] = []
        logit_rows: list[int] = []
        for chunk in chunks:
            row = len(ids)
            end = chunk.start + chunk.count
            table = self._slots(chunk.seq, end)
            ids += chunk.seq.tokens[chunk.start : end]
            positions += range(chunk.start, end)
            slots += table[chunk.start : end]
            if chunk.count == 1:
                decode_rows.append(row)
                decode_ctx.append(table)
            else:
                ctx = torch.tensor(table, dtype=torch.long, device=self.device)
                prefills.append(PrefillItem(row, row + chunk.count, ctx, chunk.start))
            if chunk.sample:
                logit_rows.append(row + chunk.count - 1)
        width = max((len(c) for c in decode_ctx), default=0)
        padded = [c + [0] * (width - len(c)) for c in decode_ctx]
        mask = [[True] * len(c) + [False] * (width - len(c)) for c in decode_ctx]
        dev = self.device
        layout = BatchLayout(
            positions=torch.tensor(positions, dtype=torch.long, device=dev),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            decode_rows=torch.tensor(decode_rows, dtype=torch.long, device=dev),
            decode_slots=torch.tensor(padded, dtype=torch.long, device=dev).view(
                len(padded), width
            ),
            decode_mask=torch.tensor(mask, dtype=torch.bool, device=dev).view(len(mask), width),
            prefills=prefills,
            logit_rows=torch.tensor(logit_rows, dtype=torch.long, device=dev),
        )
        return layout, torch.tensor(ids, dtype=torch.long, device=dev)

    def _slots(self, seq: Sequence, length: int) -> list[int]:
        """Cache slots of positions 0 .. length-1 of ``seq``."""
        bs = self.block_size
        table = self.blocks.block_table(seq.seq_id)
        return [table[p // bs] * bs + p % bs for p in range(length)]
