"""The runs section (``[runs]``, ``PARLEY_RUNS__…``; the former flat names such as
``PARLEY_LEASE_SECONDS`` still read): what a send may carry, and how workers hold, renew,
sweep and retry runs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RunSettings(BaseModel):
    model_config = {"extra": "forbid"}

    max_message_chars: int = Field(default=32_000, gt=0, description="A message's length.")
    max_title_chars: int = Field(default=200, gt=0, description="A chat title's length.")
    worker_concurrency: int | None = Field(
        default=None, gt=0, description="Runs one worker executes at once; default: engine slots."
    )
    reserved_slots: int = Field(
        default=0,
        ge=0,
        description="Run slots each worker keeps for the highest-priority tier: a run of a "
        "lower priority starts only while more than this many of the worker's are free.",
    )
    lease_seconds: float = Field(
        default=15, gt=0, description="A worker's hold on a run, renewed while it runs."
    )
    sweep_interval_seconds: float = Field(
        default=2, gt=0, description="How often the sweeper looks for lost runs."
    )
    requeue_stale_after_seconds: float = Field(
        default=10, gt=0, description="A run whose lease lapsed this long ago is tried again."
    )
    max_run_attempts: int = Field(
        default=3, gt=0, description="Attempts before a lost run is failed."
    )
    ping_interval_seconds: float = Field(
        default=15, gt=0, description="A quiet stream's keep-alive comment, this often."
    )
    max_open_streams_per_user: int = Field(
        default=8, gt=0, description="Streams one user reads at once (then 429)."
    )
    idempotency_ttl_seconds: int = Field(
        default=24 * 3600, gt=0, description="How long an Idempotency-Key is remembered."
    )
    temporary_input_ttl_seconds: float = Field(
        default=3600,
        gt=0,
        description="How long a temporary chat's conversation is kept on the bus for its run "
        "(forgotten when the run ends; a run still queued after this fails, input_expired).",
    )
