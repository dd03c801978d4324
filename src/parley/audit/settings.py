"""``[audit]``: how long the audit log keeps its records."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AuditSettings(BaseModel):
    model_config = {"extra": "forbid"}

    retention_days: int = Field(
        default=400,
        ge=1,
        description="Records older than this are deleted (the chain still verifies from "
        "the last one deleted).",
    )
    prune_interval_seconds: float = Field(
        default=3600, gt=0, description="How often a process with a sweeper prunes them."
    )
