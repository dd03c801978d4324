"""``POST /v1/embeddings``: vectors from the embedding models the operator declared
(``engines.embedding_models``), asked of their servers by this process
(``engines/embeddings.py``). Budgeted as runs are: the input's estimated tokens reserved
first (a 429 when the balance does not cover them), settled to the tokens the server counted.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from parley.accounts.principal import Principal
from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.api.routes.openai import rate_headers
from parley.engines.embeddings import estimated_tokens
from parley.errors import InvalidRequest, NotFound, PermissionDenied
from parley.openai.protocol import EmbeddingsRequest
from parley.services import Services

router = APIRouter(tags=["openai"])


@router.post("/v1/embeddings", responses=errors(400, *AUTHED, 404, 429, 503))
async def create_embeddings(
    body: EmbeddingsRequest, who: PrincipalDep, svc: ServicesDep
) -> JSONResponse:
    """Embeddings of a text, texts, or token lists, in OpenAI's list shape."""
    _check(body, svc, who)
    fields = body.model_dump(exclude_none=True)
    reserved = await svc.budget.reserve(who.user_id, who.tier, estimated_tokens(fields["input"]))
    used = 0
    try:
        embedded = await svc.embedder.embed(body.model, fields)
        used = embedded.tokens
    finally:
        await svc.budget.settle(who.user_id, who.tier, reserved, used)
    return JSONResponse(embedded.body, headers=await rate_headers(svc, who))


def _check(body: EmbeddingsRequest, svc: Services, who: Principal) -> None:
    tier = who.tier
    for name in body.model_extra or {}:
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {name}",
            code="unsupported_parameter",
            param=name,
        )
    model = body.model
    if not svc.embedder.serves(model) or not svc.submitter.rules.allows(tier, model):
        if model in svc.submitter.rules.allowed_models(tier):
            raise InvalidRequest(
                f"model {model!r} is a chat model; embeddings come from an embedding model",
                code="model_not_embedding",
                param="model",
            )
        raise NotFound(f"The model `{model}` does not exist", code="model_not_found")
    if not who.may_use(model):
        raise PermissionDenied(
            f"this API key may not use model {model!r}",
            code="model_not_allowed_for_key",
            param="model",
        )
    limit = svc.embedder.max_inputs(model)
    if body.inputs > limit:
        raise InvalidRequest(
            f"at most {limit} inputs in one request to {model!r}",
            code="too_many_inputs",
            param="input",
        )
