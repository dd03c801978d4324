"""A worker's own ``/metrics``, for a worker on a host of its own (``--metrics-port``).

Workers that share a host with an api process need none: with ``metrics_dir`` the api's
``/metrics`` already shows them. A worker never imports the HTTP api (``parley.api``), so
this is a small Starlette app beside it (``/metrics``, guarded by the same optional token,
and ``/healthz`` for a liveness probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Callable, Iterator

import uvicorn
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from parley.bus.interface import Bus
from parley.engines.interface import Engine
from parley.observability.metrics import CONTENT_TYPE, Metrics


def bearer_is(request: Request, token: SecretStr | None) -> bool:
    """No token configured, or the request's ``Authorization: Bearer`` is it."""
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.get_secret_value().encode()
    )


def metrics_app(
    metrics: Metrics,
    bus: Bus,
    engine: Engine | None,
    token: SecretStr | None,
    failing: Callable[[], str | None] = lambda: None,
) -> Starlette:
    """``/metrics``, and ``/healthz`` for a supervisor's liveness probe (503 with the reason
    once ``failing`` gives one: the worker cannot go on and is exiting), as the api's."""

    async def scrape(request: Request) -> Response:
        if not bearer_is(request, token):
            return PlainTextResponse(
                "unauthenticated", status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
        return Response(await metrics.exposition(bus, engine), media_type=CONTENT_TYPE)

    async def healthz(_: Request) -> Response:
        reason = failing()
        if reason is not None:
            return JSONResponse({"status": "failing", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ok", "reason": None})

    return Starlette(routes=[Route("/metrics", scrape), Route("/healthz", healthz)])


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the worker's own SIGINT / SIGTERM handlers stay in charge


class MetricsServer:
    """``metrics_app`` served on ``host:port`` in this event loop until ``stop``."""

    def __init__(self, app: Starlette, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off")
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(), name="metrics server")

    async def stop(self) -> None:
        self._server.should_exit = True
        await self._task
