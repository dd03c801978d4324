"""A request inside the engine: its tokens, sampling parameters and state."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum

from parley.engines.interface import FinishReason

_arrivals = itertools.count()


class SeqStatus(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class SequenceSampling:
    """One sequence's sampling, resolved (the engine's defaults filled in) from the
    request's ``engines.sampling.SamplingParams``."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    top_k: int = 0  # 0: no cut
    min_p: float = 0.0
    grammar: str | None = None  # what the answer must follow (``builtin/grammar.py``)
    logprobs: int | None = None  # None: not asked; else the alternatives a token comes with

    @property
    def shapes_logits(self) -> bool:
        """Whether anything but temperature and top-p acts on the logits
        (``builtin/logits.py``)."""
        return bool(
            self.frequency_penalty
            or self.presence_penalty
            or self.logit_bias
            or self.top_k
            or self.min_p
        )


@dataclass(eq=False, slots=True)
class Sequence:
    seq_id: str
    prompt: list[int]
    params: SequenceSampling
    priority: int = 0
    arrival: int = field(default_factory=lambda: next(_arrivals))
    output: list[int] = field(default_factory=list)
    status: SeqStatus = SeqStatus.WAITING
    num_computed: int = 0  # tokens whose K/V are in the cache
    num_cached_prompt: int = 0  # of the prompt, found in the prefix cache at admission
    finish_reason: FinishReason | None = None
    preemptions: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def in_prefill(self) -> bool:
        """More than one token still to feed (a fresh prompt, or a preempted sequence)."""
        return self.num_tokens - self.num_computed > 1

    @property
    def background(self) -> bool:
        """Below every user's priority (a summary, a warm-up)."""
        return self.priority < 0

    def rank(self) -> tuple[int, int]:
        """Sort key: higher priority first, then older first."""
        return (-self.priority, self.arrival)
