"""``GET /metrics``: Prometheus's text format, outside the OpenAPI document.

Open like ``/healthz`` unless ``metrics_token`` is set; then it needs
``Authorization: Bearer <metrics_token>`` (compared in constant time), else 401.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import Response

from parley.api.deps import ServicesDep
from parley.errors import Unauthenticated
from parley.observability.metrics import CONTENT_TYPE

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
async def metrics(request: Request, svc: ServicesDep) -> Response:
    token = svc.settings.metrics_token
    if token is not None and not _bearer_is(request, token.get_secret_value()):
        raise Unauthenticated("/metrics needs 'Authorization: Bearer <metrics token>'")
    body = await svc.metrics.exposition(svc.bus, svc.engine)
    return Response(body, media_type=CONTENT_TYPE)


def _bearer_is(request: Request, token: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
