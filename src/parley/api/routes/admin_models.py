"""The admin console's models panel: each served model's load as every process sees it on
the bus, and what each process serving it last reported of its engine (state, batch, KV
cache, a fleet's replicas with their health); a report older than three sampling intervals
is marked stale (its process stopped or cannot reach the database)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from parley.api.deps import AuditorDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.domain import utcnow
from parley.store import engine_reports

router = APIRouter(prefix="/api/admin", tags=["admin"])
STALE_INTERVALS = 3


class ReplicaHealthOut(BaseModel):
    label: str
    url: str
    healthy: bool
    in_flight: int
    served: int = Field(description="Requests sent to it since the process started.")
    slots: int


class EngineReportOut(BaseModel):
    worker_id: str = Field(description="The process serving it (host:pid:…).")
    updated_at: datetime
    stale: bool = Field(description="Not reported for three sampling intervals.")
    state: str = Field(description="ready, restarting or failed.")
    batch_sequences: int
    kv_blocks_used: int
    kv_blocks: int
    replicas: list[ReplicaHealthOut] = Field(description="A fleet's upstream servers (else none).")


class ModelHealthOut(BaseModel):
    model: str
    in_flight: int = Field(description="Runs admitted and not ended, across every process.")
    slots: int = Field(description="What its engines serve at once, as they last said.")
    load: float
    drain_rate: float = Field(description="Runs ended per second, lately.")
    engines: list[EngineReportOut]


class ModelsHealth(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelHealthOut]


@router.get("/models", response_model=ModelsHealth, responses=errors(*AUTHED))
async def models(who: AuditorDep, svc: ServicesDep) -> ModelsHealth:
    """The served models, their load and their engines' health, worker by worker."""
    async with svc.db.transaction() as s:
        reports = await engine_reports.all_reports(s)
    every = svc.settings.observability.metrics_sample_seconds
    stale_before = utcnow() - timedelta(seconds=every * STALE_INTERVALS)
    window = svc.settings.qos.load_window_seconds
    data = []
    for model in svc.models:
        load = await svc.bus.model_load(model, window=window)
        engines = [
            _engine(r.worker_id, r.updated_at, r.updated_at < stale_before, found)
            for r in reports
            for found in r.models
            if found.get("model") == model
        ]
        data.append(
            ModelHealthOut(
                model=model,
                in_flight=load.in_flight,
                slots=load.slots,
                load=round(load.load, 3),
                drain_rate=round(load.drain_rate, 3),
                engines=engines,
            )
        )
    return ModelsHealth(data=data)


def _engine(worker_id: str, at: datetime, stale: bool, found: dict[str, Any]) -> EngineReportOut:
    return EngineReportOut.model_validate(
        {**found, "worker_id": worker_id, "updated_at": at, "stale": stale}
    )
