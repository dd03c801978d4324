"""What a worker knows of one run while it generates, and the outcome it ends with."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from parley.bus.interface import RunEvent
from parley.domain import FinishReason, RunStatus
from parley.engines.interface import Delta, EngineError
from parley.engines.tools import ToolCall, ToolCallDelta, assembled
from parley.outages import outage
from parley.runs.events import delta_events, status_event
from parley.runs.moderated import OutputRefused
from parley.store.parts import MessageParts, ToolStep
from parley.store.run_ends import Outcome
from parley.store.schema import Run
from parley.text import storable


@dataclass(slots=True)
class Progress:
    run: Run
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCallDelta] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish: FinishReason | None = None
    cancelled: bool = False
    lease_lost: bool = False  # the sweeper (or a newer attempt) has the run now
    error: Exception | None = None
    over: bool = False  # generation has ended: a cancel arriving now changes nothing
    # a chat's server-side tools (``runs/tool_rounds.py``): the steps run so far, the
    # earlier model steps' prompt tokens, where this step's text and calls begin
    steps: list[ToolStep] = field(default_factory=list)
    earlier_prompt_tokens: int = 0
    _round_text: int = 0
    _round_calls: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set by a stop
    # the run's stream and this attempt's fence, read once (a mapped attribute read per
    # appended token cost ~2 % of the worker's time per token)
    run_id: str = field(init=False)
    fence: int = field(init=False)

    def __post_init__(self) -> None:
        self.run_id = self.run.id
        self.fence = self.run.attempts

    def begun(self, prefix: str) -> list[RunEvent]:
        """The stream's first events: running, and a continued answer's text so far (taken
        in as the answer's start; no tokens of this run's)."""
        events = [status_event(self.run.id, RunStatus.RUNNING)]
        if prefix:
            self.take(Delta(prefix, 0))
            events += delta_events(Delta(prefix, 0))
        return events

    def take(self, delta: Delta) -> None:
        """Count a delta in (its text once it is on the stream)."""
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.cached_tokens is not None:
            self.cached_tokens = delta.cached_tokens
        if delta.finish_reason is not None:
            self.finish = delta.finish_reason
        if delta.text or delta.tokens:
            self.text.append(delta.text)
            self.tokens += delta.tokens
        if delta.reasoning:
            self.reasoning.append(delta.reasoning)
        self.calls.extend(delta.tool_calls)

    @property
    def stopped(self) -> bool:
        return self.cancelled or self.lease_lost

    def stop(self, *, lease_lost: bool = False) -> None:
        """Cancelled (or the lease lost): what runs for the run stops at once."""
        if lease_lost:
            self.lease_lost = True
        else:
            self.cancelled = True
        self.stopping.set()

    def numbered(self, delta: Delta) -> Delta:
        """A delta with its calls numbered after the earlier steps' (one answer's calls
        have one index each)."""
        if not delta.tool_calls or not (offset := self._round_calls_offset):
            return delta
        calls = tuple(replace(c, index=c.index + offset) for c in delta.tool_calls)
        return replace(delta, tool_calls=calls)

    @property
    def _round_calls_offset(self) -> int:
        return len({c.index for c in self.calls[: self._round_calls]})

    def round_calls(self) -> list[ToolCall]:
        """The calls this model step made."""
        return assembled(self.calls[self._round_calls :])

    def round_text(self) -> str:
        return "".join(self.text[self._round_text :])

    def next_round(self, steps: list[ToolStep]) -> None:
        """This step's calls ran: the next model step begins."""
        self.steps += steps
        self.earlier_prompt_tokens += self.prompt_tokens or 0
        self.prompt_tokens = None
        self.finish = None
        self._round_text, self._round_calls = len(self.text), len(self.calls)

    def outcome(self, prompt_tokens: int | None) -> Outcome:
        """How the run ends: cancelled, failed (engine error, or an abort nobody asked for),
        or completed. ``prompt_tokens``: the count known before generating."""
        outcome = self._outcome(prompt_tokens)
        if outcome.prompt_tokens is not None and self.earlier_prompt_tokens:
            total = outcome.prompt_tokens + self.earlier_prompt_tokens
            outcome = replace(outcome, prompt_tokens=total)
        if self.run.ephemeral:  # a temporary chat's answer: on its stream, nowhere else
            return replace(outcome, content="", cached_tokens=self.cached_tokens)
        return replace(outcome, cached_tokens=self.cached_tokens, parts=self.parts())

    def parts(self) -> MessageParts:
        """The answer's reasoning and calls (or, when the server ran them, its steps), as
        its message keeps them."""
        reasoning = storable("".join(self.reasoning)) or None
        if self.steps:
            return MessageParts(reasoning, steps=tuple(self.steps))
        return MessageParts(reasoning, tuple(assembled(self.calls)))

    def _outcome(self, prompt_tokens: int | None) -> Outcome:
        text = "".join(self.text)
        prompt = self.prompt_tokens if self.prompt_tokens is not None else prompt_tokens
        if self.cancelled:  # stopped before any output: it costs nothing
            prompt = prompt if self.tokens else None
            return Outcome(
                status=RunStatus.CANCELLED,
                content=text,
                prompt_tokens=prompt,
                completion_tokens=self.tokens,
                finish_reason=FinishReason.CANCELLED,
            )
        if isinstance(self.error, OutputRefused):
            return self._refused(self.error, text, prompt)
        code, message = self._failure()
        if code is not None:
            return Outcome(
                status=RunStatus.FAILED,
                content=text,
                prompt_tokens=prompt,
                completion_tokens=self.tokens,
                finish_reason=FinishReason.ERROR,
                error_code=code,
                error_message=message,
            )
        return Outcome(
            status=RunStatus.COMPLETED,
            content=text,
            prompt_tokens=prompt,
            completion_tokens=self.tokens,
            finish_reason=self.finish or FinishReason.STOP,
        )

    def _refused(self, refused: OutputRefused, text: str, prompt: int | None) -> Outcome:
        """An answer the content policy stopped: charged what the engine generated."""
        return Outcome(
            status=RunStatus.REJECTED,
            content=text,
            prompt_tokens=prompt,
            completion_tokens=max(self.tokens, refused.generated),
            finish_reason=FinishReason.CONTENT_FILTER,
            error_code=refused.code,
            error_message=refused.message,
        )

    def _failure(self) -> tuple[str | None, str | None]:
        if isinstance(self.error, EngineError):
            return self.error.code, str(self.error) or "the engine could not serve this run"
        down = outage(self.error) if self.error is not None else None
        if down is not None:  # the bus (or database) went away mid-answer: what came is kept
            return down.code, f"the answer was cut short: {down.message.split(';')[0]}"
        if self.error is not None:
            return "engine_error", f"the engine failed: {type(self.error).__name__}"
        if self.finish is FinishReason.ABORT:
            return "engine_aborted", "the engine stopped generating this answer"
        return None, None


def storable_delta(delta: Delta) -> Delta:
    """A delta as every store keeps it: no NUL, no lone surrogate (``text.storable``);
    the delta itself when it has neither (nearly every one: no copy per token)."""
    text, reasoning = storable(delta.text), storable(delta.reasoning)
    if text == delta.text and reasoning == delta.reasoning:
        return delta
    return replace(delta, text=text, reasoning=reasoning)
