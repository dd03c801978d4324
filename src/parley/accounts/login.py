"""A session just opened (by a password, or by an identity provider): what the API hands
back and sets as cookies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from parley.store.schema import User


@dataclass(frozen=True, slots=True)
class Login:
    user: User
    token: str
    session_id: str
    expires_at: datetime
