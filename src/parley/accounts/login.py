"""A session just opened (by a password, or by an identity provider): what the API hands
back and sets as cookies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from parley.store.schema import User

# the password hash of an account a provider made (OIDC, SCIM): no password matches it
SSO_ONLY = "!sso"


@dataclass(frozen=True, slots=True)
class Login:
    user: User
    token: str
    session_id: str
    expires_at: datetime
