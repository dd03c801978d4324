"""Service tiers: what each tier of user may use, and how admission treats its runs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TierSettings(BaseModel):
    """One service tier. The numbers are used by admission (QoS)."""

    model_config = {"extra": "forbid"}

    priority: int = Field(ge=0, le=1000, description="Higher is served first (0..1000).")
    tokens_per_minute: int = Field(gt=0, description="Budget refill rate, in tokens.")
    burst_tokens: int = Field(gt=0, description="Budget capacity, in tokens.")
    max_concurrent_runs: int = Field(gt=0)
    max_output_tokens: int = Field(gt=0)
    models: list[str] = Field(default_factory=lambda: ["*"], description='"*" allows every model.')
    downgrade_model: str | None = None
    # still queued this long after it was sent: rejected (queue_wait_exceeded), nothing waits
    max_queue_wait_seconds: float = Field(default=300, gt=0)


def default_tiers() -> dict[str, TierSettings]:
    return {
        "free": TierSettings(
            priority=0,
            tokens_per_minute=2_000,
            burst_tokens=20_000,
            max_concurrent_runs=1,
            max_output_tokens=512,
            max_queue_wait_seconds=60,
        ),
        "plus": TierSettings(
            priority=1,
            tokens_per_minute=10_000,
            burst_tokens=100_000,
            max_concurrent_runs=3,
            max_output_tokens=2_048,
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
