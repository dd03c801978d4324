"""Liveness and readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from parley.api.deps import ServicesDep
from parley.api.schemas import Health, Readiness

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


async def _check(name: str, ping: Callable[[], Awaitable[None]]) -> str:
    try:
        async with asyncio.timeout(2):
            await ping()
    except Exception as e:  # any failure means not ready; the reason is reported
        log.warning("readiness: %s failed: %r", name, e)
        return f"error: {type(e).__name__}"
    return "ok"


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
    """Every dependency answers: the store and the bus."""
    checks = {
        "store": await _check("store", svc.db.ping),
        "bus": await _check("bus", svc.bus.ping),
    }
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(status="ready" if ready else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
