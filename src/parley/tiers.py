"""Service tiers: what each tier of user may use, and how admission treats its runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, model_validator


class BackoffStrategy(StrEnum):
    EXPONENTIAL = "exponential"  # base · 2^(n-1), capped: spreads a crowd of retries out
    LINEAR = "linear"  # base · n, capped: a paying user is not made to wait ever longer


class BackoffGuidance(BaseModel):
    """How a client refused for load or quota (429/503) should space its retries: the first
    after the refusal's Retry-After, each further one by this schedule (never sooner than a
    later refusal's Retry-After). Sent in every 429/503 body; the web UI follows it."""

    model_config = {"extra": "forbid"}

    strategy: BackoffStrategy
    base_seconds: float = Field(default=1.0, gt=0)
    max_seconds: float = Field(default=60.0, gt=0)
    jitter: bool = Field(default=False, description="Wait a random 50 to 100% of each delay.")

    def delay(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (1: the first retry), without jitter."""
        n = max(1, attempt)
        if self.strategy is BackoffStrategy.EXPONENTIAL:
            raw = self.base_seconds * 2.0 ** min(n - 1, 32)
        else:
            raw = self.base_seconds * n
        return min(raw, self.max_seconds)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ModerationChoice(BaseModel):
    """The classifiers (names in ``Settings.safety.classifiers``) a tier's prompts and answers
    go through; an empty list checks nothing at that stage."""

    model_config = {"extra": "forbid"}

    input: list[str] = Field(default_factory=lambda: ["rules"])
    output: list[str] = Field(default_factory=lambda: ["rules"])


class TierSettings(BaseModel):
    """One service tier. The numbers are used by admission (QoS)."""

    model_config = {"extra": "forbid"}

    priority: int = Field(ge=0, le=1000, description="Higher is served first (0..1000).")
    tokens_per_minute: int = Field(gt=0, description="Budget refill rate, in tokens.")
    burst_tokens: int = Field(gt=0, description="Budget capacity, in tokens.")
    max_concurrent_runs: int = Field(gt=0, description="A user's runs queued or running.")
    max_output_tokens: int = Field(gt=0)
    # a chat's prompt is assembled within the model's window less the output allowance,
    # and within this (history beyond it is summarized or retrieved); None: the window
    max_input_tokens: int | None = Field(default=None, gt=0)
    models: list[str] = Field(default_factory=lambda: ["*"], description='"*" allows every model.')
    # shedding: a new run that would push its model's load ((queued + running) ÷ slots) above
    # this is refused (503 server_overloaded), or served by downgrade_model if that has room;
    # None: refused only when the queue is full
    max_load: float | None = Field(default=None, gt=0)
    downgrade_model: str | None = None
    # still queued this long after it was sent: rejected (queue_wait_exceeded), nothing waits
    max_queue_wait_seconds: float = Field(default=300, gt=0)
    backoff: BackoffGuidance = Field(
        default_factory=lambda: BackoffGuidance(strategy=BackoffStrategy.LINEAR, max_seconds=30)
    )
    moderation: ModerationChoice = Field(default_factory=ModerationChoice)
    # server-side tools a chat's run may call (tools/toolbox.py names them), and their bounds
    tools: list[str] = Field(
        default_factory=lambda: ["search_chats", "read_message", "fetch_url", "run_python"],
        description="The server's tools a chat may use; [] for none.",
    )
    max_tool_rounds: int = Field(
        default=4, ge=0, description="Model steps that call tools, in one answer, at most."
    )
    max_tool_seconds: float = Field(
        default=60, gt=0, description="Time the tools of one answer may take, in all."
    )

    @model_validator(mode="after")
    def _downgrade_needs_shedding(self) -> TierSettings:
        if self.downgrade_model is not None and self.max_load is None:
            raise ValueError("downgrade_model needs max_load (the load above which it is used)")
        return self


def default_tiers() -> dict[str, TierSettings]:
    return {
        "free": TierSettings(
            priority=0,
            tokens_per_minute=2_000,
            burst_tokens=20_000,
            max_concurrent_runs=1,
            max_output_tokens=512,
            max_input_tokens=4_096,
            max_load=0.9,
            max_queue_wait_seconds=60,
            backoff=BackoffGuidance(
                strategy=BackoffStrategy.EXPONENTIAL, base_seconds=2, max_seconds=120, jitter=True
            ),
        ),
        "plus": TierSettings(
            priority=1,
            tokens_per_minute=10_000,
            burst_tokens=100_000,
            max_concurrent_runs=3,
            max_output_tokens=2_048,
            max_load=1.5,
            max_queue_wait_seconds=120,
        ),
        "pro": TierSettings(
            priority=2,
            tokens_per_minute=50_000,
            burst_tokens=500_000,
            max_concurrent_runs=8,
            max_output_tokens=4_096,
        ),
    }
