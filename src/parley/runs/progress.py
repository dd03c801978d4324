"""What a worker knows of one run while it generates, and the outcome it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from parley.domain import FinishReason, RunStatus
from parley.engines.interface import Delta, EngineError
from parley.engines.tools import ToolCallDelta, assembled
from parley.outages import outage
from parley.runs.moderated import OutputRefused
from parley.store.parts import MessageParts
from parley.store.run_records import Outcome
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

    def outcome(self, prompt_tokens: int | None) -> Outcome:
        """How the run ends: cancelled, failed (engine error, or an abort nobody asked for),
        or completed. ``prompt_tokens``: the count known before generating."""
        outcome = self._outcome(prompt_tokens)
        return replace(outcome, cached_tokens=self.cached_tokens, parts=self.parts())

    def parts(self) -> MessageParts:
        """The answer's reasoning and calls, as its message keeps them."""
        reasoning = storable("".join(self.reasoning)) or None
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
    """A delta as every store keeps it: no NUL, no lone surrogate (``text.storable``)."""
    return replace(delta, text=storable(delta.text), reasoning=storable(delta.reasoning))
