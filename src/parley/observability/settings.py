"""The observability section (``[observability]``, ``PARLEY_OBSERVABILITY__…``; the former
flat names such as ``PARLEY_OTLP_ENDPOINT`` still read): logs, traces and metrics."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator

from parley.logs import LogFormat


class ObservabilitySettings(BaseModel):
    model_config = {"extra": "forbid"}

    log_format: LogFormat = Field(
        default=LogFormat.AUTO,
        description="Log lines: json, text, or auto (JSON unless stderr is a terminal).",
    )
    # traces (parley.observability.tracing): off unless an OTLP endpoint is configured
    otlp_endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s]+$",
        description="OTLP/HTTP collector (http://host:4318); spans go to its /v1/traces.",
    )
    trace_sample_ratio: float = Field(
        default=1.0, ge=0, le=1, description="Traces sampled where no caller decided."
    )
    service_name: str | None = Field(
        default=None, description="Spans' service.name; default parley-api, -worker or -serve."
    )
    metrics_dir: Path | None = Field(
        default=None,
        description="A directory every parley process of this host writes its metrics to "
        "(prometheus_client's multiprocess mode): /metrics of any shows them all. It must "
        "exist and be writable; empty it before the processes start.",
    )
    metrics_token: SecretStr | None = Field(
        default=None, description="When set, /metrics needs 'Authorization: Bearer <token>'."
    )
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="parley worker: serve its own /metrics here."
    )
    metrics_sample_seconds: float = Field(
        default=5, gt=0, description="How often a process with an engine samples its load."
    )

    @field_validator("metrics_dir")
    @classmethod
    def _writable_directory(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        path = path.resolve()
        if not path.is_dir():
            raise ValueError(f"{path} is not a directory (create it before starting parley)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{path} is not writable by this process")
        return path
