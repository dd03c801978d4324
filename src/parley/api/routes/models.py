"""Models: the ones the caller's tier may send to."""

from __future__ import annotations

from fastapi import APIRouter

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.api.schemas import ModelList, ModelOut
from parley.engines.registry import model_settings

router = APIRouter(tags=["models"])


@router.get("/api/models", response_model=ModelList, responses=errors(*AUTHED))
async def list_models(who: PrincipalDep, svc: ServicesDep) -> ModelList:
    """The configured models your tier allows, in the configured order (the default is
    configured first; it is missing if your tier may not use it)."""
    engines = {m.name: m.engine for m in model_settings(svc.settings.engines)}
    default = svc.models[0]
    return ModelList(
        data=[
            ModelOut(id=name, default=name == default, engine=engines[name])
            for name in svc.submitter.rules.allowed_models(who.tier)
        ]
    )
