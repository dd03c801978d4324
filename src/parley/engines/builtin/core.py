"""The engine core: one scheduler step at a time.

``EngineCore.step()`` asks the scheduler for a batch, lays it out for the model,
runs one forward pass, samples, and reports each sequence's new token. The
``EngineLoop`` thread (loop.py) feeds it requests and aborts from other threads and
calls it while there is work, so the asyncio event loop never waits on a forward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from parley.engines.builtin.block_manager import BlockManager
from parley.engines.builtin.grammar import Grammars
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.runner import ModelRunner
from parley.engines.builtin.sampler import Sampled
from parley.engines.builtin.scheduler import Scheduler
from parley.engines.builtin.sequence import Sequence
from parley.engines.interface import EngineError, FinishReason


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A sequence produced ``token`` (None when it ended without one, e.g. aborted); an
    ``error`` ends it with that error instead of a finish."""

    seq: Sequence
    token: int | None
    finish: FinishReason | None
    error: EngineError | None = None
    logprob: Sampled | None = None  # when the sequence asked for log probabilities


@dataclass(frozen=True, slots=True)
class StepStats:
    batch_tokens: int
    batch_sequences: int
    seconds: float


class EngineCore:
    """The scheduler and the model runner: one step = plan, forward, sample, report."""

    def __init__(
        self,
        model: LlamaModel,
        *,
        num_blocks: int,
        block_size: int = 16,
        max_batch_tokens: int = 512,
        max_running: int = 64,
        eos_token_ids: tuple[int, ...] = (),
        grammars: Grammars | None = None,
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.blocks = BlockManager(num_blocks, block_size)
        self.scheduler = Scheduler(
            self.blocks, max_batch_tokens=max_batch_tokens, max_running=max_running
        )
        self.runner = ModelRunner(model, self.blocks, num_blocks, grammars)
        self.eos = set(eos_token_ids)
        self.last_step: StepStats | None = None

    def reset(self) -> None:
        """Forget every sequence: fresh block tables, scheduler and generators (after a
        failure left them in an unknown state). The model and the KV cache's memory stay;
        what the cache held is unreachable without the old block tables."""
        self.blocks = BlockManager(self.num_blocks, self.block_size)
        self.scheduler = Scheduler(
            self.blocks, max_batch_tokens=self.max_batch_tokens, max_running=self.max_running
        )
        self.runner.reset(self.blocks)
        self.last_step = None

    def add(self, seq: Sequence) -> None:
        self.runner.add(seq)
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
        logits = self.runner.forward(plan.chunks)
        for chunk in plan.chunks:
            self.scheduler.computed(chunk)
        sampling = [c.seq for c in plan.chunks if c.sample]
        if sampling:
            tokens, logprobs = self.runner.sample(logits, sampling)
            events += [
                self._advance(s, t, logprobs.get(i))
                for i, (s, t) in enumerate(zip(sampling, tokens, strict=True))
            ]
        self.last_step = StepStats(
            plan.num_tokens, len({c.seq.seq_id for c in plan.chunks}), time.perf_counter() - started
        )
        return events

    def _advance(self, seq: Sequence, token: int, logprob: Sampled | None) -> TokenEvent:
        seq.output.append(token)
        finish = None
        if token in self.eos:
            finish = FinishReason.STOP
        elif len(seq.output) >= seq.params.max_tokens:
            finish = FinishReason.LENGTH
        if finish is not None:
            self._retire(seq)
        return TokenEvent(seq, token, finish, logprob=logprob)

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self.runner.forget(seq)
