"""What the audit log records: one action each, and who and what a record is about."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class AuditAction(StrEnum):
    SIGNUP = "account.signup"
    LOGIN = "session.login"
    LOGIN_FAILED = "session.login_failed"
    LOGOUT = "session.logout"
    LOGOUT_EVERYWHERE = "session.logout_everywhere"
    SESSION_ENDED = "session.ended"
    PASSWORD_CHANGED = "account.password_changed"  # noqa: S105 (an action's name)
    PASSWORD_RESET = "account.password_reset"  # noqa: S105 (an action's name)
    RESET_LINK_MADE = "user.reset_link_made"
    EMAIL_CONFIRMED = "account.email_confirmed"
    ACCOUNT_DELETED = "account.deleted"
    KEY_CREATED = "api_key.created"
    KEY_REVOKED = "api_key.revoked"
    TIER_CHANGED = "user.tier_changed"
    ROLE_CHANGED = "user.role_changed"
    USER_DISABLED = "user.disabled"
    USER_ENABLED = "user.enabled"
    USER_CREATED = "user.created"
    USER_LINKED = "user.linked"  # an identity provider's push took over an existing account
    EMAIL_CHANGED = "user.email_changed"
    SESSIONS_ENDED = "user.sessions_ended"
    KEYS_REVOKED = "user.keys_revoked"
    SHARE_CREATED = "share.created"
    SHARE_REVOKED = "share.revoked"
    EXPORT_DOWNLOADED = "export.downloaded"
    ADMIN_READ = "admin.read"
    AUDIT_PRUNED = "audit.pruned"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acted: a user (their id and email), or the operator's CLI, or the system."""

    id: str | None
    name: str

    @classmethod
    def cli(cls) -> Actor:
        return cls(None, "cli")

    @classmethod
    def system(cls) -> Actor:
        return cls(None, "system")


@dataclass(frozen=True, slots=True)
class Where:
    """Where a request came from (none for the CLI and the system)."""

    address: str | None = None
    user_agent: str | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEvent:
    action: AuditAction
    actor: Actor
    target_type: str | None = None
    target_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    where: Where = field(default_factory=Where)
