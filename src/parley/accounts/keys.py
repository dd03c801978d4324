"""An API key's limits: what a new one may do (scopes, models, an end), what a key's
principal carries of them, and a new key with its secret (shown once)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from parley.domain import LEGACY_SCOPES
from parley.store.schema import ApiKey
from parley.store.schema import Session as SessionRow


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """What a new key may do: its scopes (``domain.KeyScope``), its models (None: any its
    tier allows), its end."""

    scopes: list[str] = field(default_factory=lambda: sorted(LEGACY_SCOPES))
    models: list[str] | None = None
    expires_at: datetime | None = None


def key_limits(credential: SessionRow | ApiKey) -> dict[str, Any]:
    """An API key's scopes and models, as its principal carries them."""
    if not isinstance(credential, ApiKey):
        return {}
    scopes = LEGACY_SCOPES if credential.scopes is None else json.loads(credential.scopes)
    models = None if credential.models is None else tuple(json.loads(credential.models))
    return {"scopes": frozenset(scopes), "models": models}


@dataclass(frozen=True, slots=True)
class NewApiKey:
    key: ApiKey
    secret: str
