"""The bus section (``[bus]``, ``PARLEY_BUS__…``; the former flat names such as
``PARLEY_REDIS_URL`` still read): in-process or Redis, and how long run streams live."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BusSettings(BaseModel):
    model_config = {"extra": "forbid"}

    redis_url: str | None = Field(
        default=None, description="redis://…; without it the bus is in-process (one process)."
    )
    redis_namespace: str = Field(
        default="parley", pattern=r"^[A-Za-z0-9_.:-]+$", description="Prefix of every Redis key."
    )
    stream_maxlen: int = Field(
        default=20_000, gt=0, description="Entries a run's stream keeps (above any answer)."
    )
    stream_ttl_seconds: float = Field(
        default=3600, gt=0, description="How long a finished run's stream stays readable."
    )
    stream_append_batching: bool = Field(
        default=True,
        description="A process's appends to run streams queued while one round trip to Redis "
        "is out go together, pipelined, in the next (one round trip per flush for all runs, "
        "not one per token per run); false: each alone.",
    )
