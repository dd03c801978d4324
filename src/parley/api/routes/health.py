"""Liveness and readiness."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from parley.api.deps import ServicesDep
from parley.api.schemas import Health, Readiness

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A dependency is not ready"}},
)
async def readyz(svc: ServicesDep) -> JSONResponse:
    """Every dependency answers: the store (the bus and engines join later)."""
    checks: dict[str, str] = {}
    try:
        await svc.db.ping()
        checks["store"] = "ok"
    except Exception as e:  # any failure means not ready; the reason is reported
        log.warning("readiness: store failed: %s", e)
        checks["store"] = f"error: {type(e).__name__}"
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(status="ready" if ready else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
