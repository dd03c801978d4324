"""The one error tree of parley.

Every failure a client can cause or observe is a ``ParleyError``. The HTTP edge
(``parley.api.error_responses``) maps them to a status code and the JSON error shape
``{"error": {"type", "code", "message", "param"}}``; nothing else in the code
knows about HTTP status codes. ``retry_after`` becomes ``Retry-After``; ``headers``
are further response headers a client acts on (e.g. the ``x-ratelimit-*`` family).
"""

from __future__ import annotations

from collections.abc import Mapping


class ParleyError(Exception):
    """Base of all errors parley reports to its clients."""

    status_code: int = 500
    type: str = "server_error"
    code: str = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param
        self.retry_after = retry_after
        self.headers = dict(headers or {})
        # how a refused client should space its retries (a tier's ``BackoffGuidance`` as
        # JSON), added at the edge to a 429/503 for the refused user's tier
        self.backoff: dict[str, object] | None = None


class InvalidRequest(ParleyError):
    status_code = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContentBlocked(InvalidRequest):
    """A prompt the content policy refuses (``safety/``): stored as refused, never run or
    billed. ``category`` names the policy it breaks."""

    code = "content_blocked"

    def __init__(self, message: str, *, category: str | None) -> None:
        super().__init__(message, param="content")
        self.category = category


class Unauthenticated(ParleyError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_credentials"


class PermissionDenied(ParleyError):
    status_code = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(ParleyError):
    status_code = 404
    type = "not_found_error"
    code = "not_found"


class MethodNotAllowed(ParleyError):
    status_code = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class Conflict(ParleyError):
    status_code = 409
    type = "conflict_error"
    code = "conflict"


class PayloadTooLarge(ParleyError):
    status_code = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class UnsupportedMediaType(ParleyError):
    status_code = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class ValidationFailed(ParleyError):
    status_code = 422
    type = "invalid_request_error"
    code = "validation_error"


class RateLimited(ParleyError):
    status_code = 429
    type = "rate_limit_error"
    code = "rate_limited"


class BudgetExhausted(RateLimited):
    """The user's token budget does not cover the run's estimated cost (yet)."""

    code = "budget_exhausted"


class TooManyRuns(RateLimited):
    """The user has as many runs queued or running as their tier allows at once."""

    code = "too_many_runs"


class Unavailable(ParleyError):
    status_code = 503
    type = "service_unavailable"
    code = "unavailable"


class DependencyUnavailable(Unavailable):
    """The database or the message bus cannot be reached (an outage, a cut connection): the
    request changed nothing; retry shortly (``parley.outages``)."""

    code = "dependency_unavailable"


class ModerationUnavailable(Unavailable):
    """A prompt that could not be checked: a classifier that fails closed gave no verdict.
    Nothing was stored or charged; retry shortly."""

    code = "moderation_unavailable"


class Overloaded(Unavailable):
    """The model is too busy to take this tier's runs now (load shedding)."""

    code = "server_overloaded"


ECHO_LIMIT = 64


def quoted(value: str, limit: int = ECHO_LIMIT) -> str:
    """A value a client sent, as an error message quotes it: repr'd, at most ``limit``
    characters of it (then "…"), so an error never echoes a request back whole."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def no_such(what: str, value: str, *, code: str, param: str) -> NotFound:
    """The one "no <what> with id <value>" error (the id quoted, cut short)."""
    return NotFound(f"no {what} with id {quoted(value)}", code=code, param=param)


class ConfigurationError(Exception):
    """Settings that cannot be used; raised at start-up, never seen by clients."""
