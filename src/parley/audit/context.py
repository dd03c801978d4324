"""Where the request being served came from, for the records it makes: set once per
request by the API's dependency (``api/deps.audit_where``), read by ``AuditLog`` when an
event does not say (the CLI's and the system's events come from nowhere)."""

from __future__ import annotations

from contextvars import ContextVar

from parley import logs
from parley.audit.actions import Where

_where: ContextVar[Where | None] = ContextVar("parley_audit_where", default=None)


def arrived(address: str | None, user_agent: str | None) -> None:
    """The request now served came from ``address`` with ``user_agent``."""
    _where.set(Where(address, (user_agent or "")[:300] or None, logs.bound().get("request_id")))


def here() -> Where:
    return _where.get() or Where()
