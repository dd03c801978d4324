"""``[parsing]``: the pool of processes that parse uploaded files (PDFs, imports)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ParsingSettings(BaseModel):
    model_config = {"extra": "forbid"}

    workers: int = Field(
        default=2, ge=1, le=64, description="processes parsing files at once (each one job)"
    )
    queue: int = Field(
        default=32,
        ge=0,
        description="jobs waiting for a free process beyond those; past it: 503 with Retry-After",
    )
    per_user: int = Field(
        default=2, ge=1, description="one user's files parsed (or waiting) at once; past it: 429"
    )
    cpu_seconds: int = Field(
        default=10, ge=1, description="CPU time one file may take; past it: 422 file_too_costly"
    )
    wall_seconds: float = Field(
        default=30, gt=0, description="time one file may take, waiting included; past it: 422"
    )
    memory_mb: int = Field(
        default=1024,
        ge=64,
        description="memory one parsing process may take beyond its start; past it: 422",
    )
    nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="the parsing processes' niceness: requests of the server go first",
    )
