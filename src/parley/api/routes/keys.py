"""API keys: create (the secret is shown once) with scopes, models and an end; list (with
their last use and its address); revoke."""

from __future__ import annotations

import json
from datetime import timedelta

from fastapi import APIRouter, status

from parley.accounts.keys import KeyLimits
from parley.accounts.principal import Principal
from parley.api.deps import ServicesDep, SessionPrincipalDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyOut, Deleted
from parley.domain import LEGACY_SCOPES, KeyScope, UserRole, utcnow
from parley.errors import PermissionDenied, ValidationFailed
from parley.services import Services
from parley.store.schema import ApiKey

router = APIRouter(prefix="/api/keys", tags=["api keys"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
    responses=errors(*AUTHED, 403, *BODY),
)
async def create_key(
    body: ApiKeyCreate, who: SessionPrincipalDep, svc: ServicesDep
) -> ApiKeyCreated:
    name = body.name.strip()
    limit = svc.settings.accounts.max_key_name_chars
    if not name or len(name) > limit:
        raise ValidationFailed(
            f"name must be 1 to {limit} characters", code="invalid_name", param="name"
        )
    limits = _limits(body, who, svc)
    created = await svc.accounts.create_api_key(who, name, limits)
    return ApiKeyCreated(**key_out(created.key).model_dump(), key=created.secret)


def _limits(body: ApiKeyCreate, who: Principal, svc: Services) -> KeyLimits:
    """What the key may do, checked: the ``admin`` scope only for an admin or auditor, and
    only models this service has."""
    if KeyScope.ADMIN in body.scopes and who.role not in (UserRole.ADMIN, UserRole.AUDITOR):
        raise PermissionDenied(
            "only admins and auditors can make a key with the admin scope", code="admin_only"
        )
    known = set(svc.models) | set(svc.embedder.names())
    for model in body.models or []:
        if model not in known:
            raise ValidationFailed(
                f"unknown model {model!r}", code="model_not_found", param="models"
            )
    days = body.expires_in_days
    return KeyLimits(
        scopes=sorted({s.value for s in body.scopes}),
        models=body.models,
        expires_at=None if days is None else utcnow() + timedelta(days=days),
    )


def key_out(key: ApiKey) -> ApiKeyOut:
    scopes = sorted(LEGACY_SCOPES) if key.scopes is None else json.loads(key.scopes)
    models = None if key.models is None else json.loads(key.models)
    return ApiKeyOut(
        id=key.id,
        name=key.name,
        hint=key.hint,
        scopes=scopes,
        models=models,
        expires_at=key.expires_at,
        created_at=key.created_at,
        last_used_at=key.last_used_at,
        last_used_address=key.last_used_address,
    )


@router.get("", response_model=ApiKeyList, responses=errors(*AUTHED))
async def list_keys(who: SessionPrincipalDep, svc: ServicesDep) -> ApiKeyList:
    keys = await svc.accounts.list_api_keys(who)
    return ApiKeyList(data=[key_out(k) for k in keys])


@router.delete("/{key_id}", response_model=Deleted, responses=errors(*AUTHED, 404))
async def revoke_key(key_id: str, who: SessionPrincipalDep, svc: ServicesDep) -> Deleted:
    await svc.accounts.revoke_api_key(who, key_id)
    return Deleted(id=key_id, object="api_key.deleted")
