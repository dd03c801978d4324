"""Route modules, one per resource."""

from __future__ import annotations

from typing import Any

from parley.api.schemas import ErrorBody

_DESCRIPTIONS = {
    400: "Bad request",
    401: "Missing, invalid, expired or revoked credentials",
    403: "Forbidden (CSRF check failed, or the wrong kind of credential)",
    404: "Not found (or not yours)",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported file type",
    422: "Validation failed",
    429: "Rate limited; see Retry-After",
    503: "Unavailable; see Retry-After",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses, all in the one error shape."""
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}


AUTHED = (401, 403)
BODY = (400, 413, 422)
