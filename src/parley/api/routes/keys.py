"""API keys: create (the secret is shown once), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, status

from parley.api.deps import ServicesDep, SessionPrincipalDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyOut, Deleted
from parley.errors import ValidationFailed

router = APIRouter(prefix="/api/keys", tags=["api keys"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
    responses=errors(*AUTHED, *BODY),
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
    created = await svc.accounts.create_api_key(who, name)
    out = ApiKeyOut.model_validate(created.key, from_attributes=True)
    return ApiKeyCreated(**out.model_dump(), key=created.secret)


@router.get("", response_model=ApiKeyList, responses=errors(*AUTHED))
async def list_keys(who: SessionPrincipalDep, svc: ServicesDep) -> ApiKeyList:
    keys = await svc.accounts.list_api_keys(who)
    return ApiKeyList(data=[ApiKeyOut.model_validate(k, from_attributes=True) for k in keys])


@router.delete("/{key_id}", response_model=Deleted, responses=errors(*AUTHED, 404))
async def revoke_key(key_id: str, who: SessionPrincipalDep, svc: ServicesDep) -> Deleted:
    await svc.accounts.revoke_api_key(who, key_id)
    return Deleted(id=key_id, object="api_key.deleted")
