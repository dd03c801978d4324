"""Liveness and readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from parley.api.deps import ServicesDep
from parley.api.schemas import Health, Readiness
from parley.engines.interface import EngineState

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


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "The process cannot go on"}},
)
async def healthz(svc: ServicesDep) -> JSONResponse:
    """The process is up: 503 ``failing`` once it cannot go on (its engine failed for good,
    or a background task kept dying: ``parley.supervision``); it is then exiting."""
    supervisor = svc.supervisor
    if supervisor.fatal.is_set():
        body = Health(status="failing", reason=supervisor.reason)
        return JSONResponse(body.model_dump(), status_code=503)
    return JSONResponse(Health().model_dump())


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A dependency is not ready"}},
)
async def readyz(svc: ServicesDep) -> JSONResponse:
    """Every dependency answers (the store and the bus), the engine of a process that has
    one can serve, and every background task is running."""
    checks = {
        "store": await _check("store", svc.db.ping),
        "bus": await _check("bus", svc.bus.ping),
    }
    if svc.engine is not None:
        state = svc.engine.state()
        checks["engine"] = "ok" if state is EngineState.READY else state.value
    problems = svc.supervisor.problems()
    checks["tasks"] = "ok" if not problems else "; ".join(f"{k} {v}" for k, v in problems.items())
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(status="ready" if ready else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
