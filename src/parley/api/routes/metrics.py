"""``GET /metrics``: Prometheus's text format, outside the OpenAPI document.

Open like ``/healthz`` unless ``metrics_token`` is set; then it needs
``Authorization: Bearer <metrics_token>`` (compared in constant time), else 401.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from parley.api.deps import ServicesDep
from parley.errors import Unauthenticated
from parley.observability.metrics import CONTENT_TYPE
from parley.observability.server import bearer_is

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
async def metrics(request: Request, svc: ServicesDep) -> Response:
    if not bearer_is(request, svc.settings.observability.metrics_token):
        raise Unauthenticated("/metrics needs 'Authorization: Bearer <metrics token>'")
    body = await svc.metrics.exposition(svc.bus, svc.engine)
    return Response(body, media_type=CONTENT_TYPE)
