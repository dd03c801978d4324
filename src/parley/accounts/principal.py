"""Who a request acts for: the one type every layer past authentication passes around."""

from __future__ import annotations

from dataclasses import dataclass

from parley.domain import CredentialKind, UserRole


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for, and by which credential."""

    user_id: str
    email: str
    tier: str
    kind: CredentialKind
    credential_id: str
    role: UserRole = UserRole.USER
