"""The one place errors become HTTP: the JSON error shape and its status codes."""

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

from parley.errors import ParleyError, Unauthenticated

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "unauthenticated"),
    403: ("permission_error", "forbidden"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "payload_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
}


def error_response(
    status: int,
    *,
    type: str,
    code: str,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": type, "code": code, "message": message, "param": param}}
    return JSONResponse(body, status_code=status, headers=headers)


def parley_error_response(exc: ParleyError) -> JSONResponse:
    headers = dict(exc.headers)
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="parley"'
    return error_response(
        exc.status_code,
        type=exc.type,
        code=exc.code,
        message=exc.message,
        param=exc.param,
        headers=headers or None,
    )


async def _on_parley_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ParleyError)
    return parley_error_response(exc)


async def _on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors: Sequence[dict[str, Any]] = exc.errors()
    first: dict[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = _param(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return error_response(
            400,
            type="invalid_request_error",
            code="invalid_json",
            message=f"the body is not valid JSON: {(first.get('ctx') or {}).get('error', '')}",
        )
    message = "; ".join(f"{_param(e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors)
    return error_response(
        422, type="invalid_request_error", code="validation_error", message=message, param=param
    )


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    type_, code = _HTTP_CODES.get(exc.status_code, ("invalid_request_error", "http_error"))
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return error_response(
        exc.status_code,
        type=type_,
        code=code,
        message=str(exc.detail),
        headers=headers or None,
    )


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(
        500, type="server_error", code="internal_error", message="internal server error"
    )


def _param(loc: Sequence[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    return ".".join(parts) or None


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ParleyError, _on_parley_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
