"""The one place errors become HTTP: the JSON error shape and its status codes.

Every error body is made from an error of the tree (``parley.errors``): the tree's own
errors, FastAPI's validation errors, Starlette's HTTP errors (404 for an unknown path, 405,
...), the body limit's 413 and unexpected exceptions (500, answered by ``api/edge.py`` with
a request id) are all turned into one first.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from parley.errors import (
    ContentBlocked,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ParleyError,
    PayloadTooLarge,
    PermissionDenied,
    Unauthenticated,
    UnsupportedMediaType,
    ValidationFailed,
)
from parley.outages import OUTAGE_EXCEPTIONS, outage
from parley.qos.budget import rate_limit_headers

log = logging.getLogger(__name__)

_HTTP_ERRORS: dict[int, tuple[type[ParleyError], str | None]] = {
    400: (InvalidRequest, "bad_request"),
    401: (Unauthenticated, "unauthenticated"),
    403: (PermissionDenied, None),
    404: (NotFound, None),
    405: (MethodNotAllowed, None),
    413: (PayloadTooLarge, None),
    415: (UnsupportedMediaType, None),
}


def error_body(exc: ParleyError) -> dict[str, Any]:
    """The JSON body of an error of the tree; a refusal (429/503) also says when to retry
    (``retry_after``, seconds, as Retry-After says) and how to back off after that."""
    error: dict[str, Any] = {
        "type": exc.type,
        "code": exc.code,
        "message": exc.message,
        "param": exc.param,
    }
    if exc.retry_after is not None:
        error["retry_after"] = _whole_seconds(exc.retry_after)
    if exc.backoff is not None:
        error["backoff"] = exc.backoff
    if isinstance(exc, ContentBlocked):
        error["category"] = exc.category  # the policy the prompt breaks
    return {"error": error}


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def error_headers(exc: ParleyError) -> dict[str, str]:
    """The headers an error of the tree answers with (Retry-After, WWW-Authenticate, ...)."""
    headers = dict(exc.headers)
    if exc.retry_after is not None:
        headers["Retry-After"] = str(_whole_seconds(exc.retry_after))
    if isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="parley"'
    return headers


def parley_error_response(exc: ParleyError) -> JSONResponse:
    headers = error_headers(exc)
    return JSONResponse(error_body(exc), status_code=exc.status_code, headers=headers or None)


async def _on_parley_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ParleyError)
    if exc.status_code in _REFUSALS:
        _count_refusal(request, exc)
        _add_backoff(request, exc)
    await _with_rate_limits(request, exc)
    return parley_error_response(exc)


_REFUSALS = frozenset({429, 503})  # refused for load or quota: counted by tier and code


def _count_refusal(request: Request, exc: ParleyError) -> None:
    """Count a refusal under the tier of whoever was refused (``api.deps.principal`` keeps
    it on the request; none before authentication: sign-up and log-in throttles)."""
    services = getattr(request.app.state, "services", None)
    if services is None:
        return
    who = getattr(request.state, "principal", None)
    services.metrics.refused(getattr(who, "tier", None), exc.code)


def _add_backoff(request: Request, exc: ParleyError) -> None:
    """The refused user's tier's back-off guidance (the default tier's before log-in)."""
    services = getattr(request.app.state, "services", None)
    if services is None:
        return
    who = getattr(request.state, "principal", None)
    qos = services.settings.qos
    tier = qos.tier(who.tier if who is not None else qos.default_tier)
    exc.backoff = tier.backoff.to_json()


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    error = _validation_error(exc.errors())
    if request.url.path.startswith(OPENAI_PREFIX) and isinstance(error, ValidationFailed):
        # OpenAI's API answers an invalid parameter with 400 (its clients' BadRequestError)
        error = InvalidRequest(error.message, code="invalid_parameter", param=error.param)
    await _with_rate_limits(request, error)
    return parley_error_response(error)


OPENAI_PREFIX = "/v1/"


async def _with_rate_limits(request: Request, exc: ParleyError) -> None:
    """OpenAI's API answers every authenticated request with the ``x-ratelimit-*`` headers,
    refusals included: the caller's token balance, unless the error carries it already."""
    who = getattr(request.state, "principal", None)
    services = getattr(request.app.state, "services", None)
    if who is None or services is None or not request.url.path.startswith(OPENAI_PREFIX):
        return
    if "x-ratelimit-limit-tokens" not in exc.headers:
        try:
            balance = await services.budget.balance(who.user_id, who.tier)
        except OUTAGE_EXCEPTIONS:  # the bus is down: the error goes out without them
            return
        exc.headers = {**rate_limit_headers(balance), **exc.headers}


def _validation_error(errors: Sequence[dict[str, Any]]) -> ParleyError:
    first: dict[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "")
        return InvalidRequest(f"the body is not valid JSON: {reason}", code="invalid_json")
    message = "; ".join(f"{_param(e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors)
    return ValidationFailed(message, param=_param(first.get("loc", ())))


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return parley_error_response(_http_error(exc.status_code, str(exc.detail), headers))


def _http_error(status: int, message: str, headers: dict[str, str]) -> ParleyError:
    kind, code = _HTTP_ERRORS.get(status, (InvalidRequest, "http_error"))
    error = kind(message, code=code, headers=headers)
    error.status_code = status
    return error


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _param(loc: Sequence[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    return ".".join(parts) or None


async def _on_outage(request: Request, exc: Exception) -> JSONResponse:
    """A dependency's outage (``parley.outages``): 503 with Retry-After; any other error of
    those classes is a bug, 500 with the request's id (logged by ``api/edge.py``'s rule)."""
    refusal = outage(exc)
    if refusal is None:
        log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return parley_error_response(ParleyError("internal server error"))
    log.warning("%s %s refused: %s", request.method, request.url.path, refusal.message)
    _count_refusal(request, refusal)
    _add_backoff(request, refusal)
    return parley_error_response(refusal)


def install_error_handlers(app: FastAPI) -> None:
    for kind in OUTAGE_EXCEPTIONS:
        app.add_exception_handler(kind, _on_outage)
    app.add_exception_handler(ParleyError, _on_parley_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    # unexpected exceptions (500) are answered by api/edge.Edge, which keeps the connection
