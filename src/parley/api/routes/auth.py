"""Accounts: sign up, log in, log out, who am I."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request, Response, status

from parley.accounts.service import Login
from parley.api.deps import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    PrincipalDep,
    ServicesDep,
    SessionPrincipalDep,
)
from parley.api.routes import AUTHED, BODY, errors
from parley.api.schemas import (
    AuthOut,
    BudgetOut,
    Credentials,
    LoginRequest,
    MeOut,
    TierOut,
    UserOut,
)
from parley.bus.interface import TokenBalance
from parley.services import Services

router = APIRouter(prefix="/api", tags=["accounts"])


@router.post(
    "/auth/signup",
    status_code=status.HTTP_201_CREATED,
    response_model=AuthOut,
    responses=errors(*BODY, 409),
)
async def signup(body: Credentials, response: Response, svc: ServicesDep) -> AuthOut:
    """Create an account on the default tier and log it in."""
    login = await svc.accounts.signup(body.email, body.password)
    return _logged_in(login, response, svc)


@router.post("/auth/login", response_model=AuthOut, responses=errors(*BODY, 401, 429))
async def login(
    body: LoginRequest, request: Request, response: Response, svc: ServicesDep
) -> AuthOut:
    """Log in: returns the token and sets it as an HttpOnly cookie."""
    client = request.client.host if request.client else None
    result = await svc.accounts.login(body.email, body.password, client)
    return _logged_in(result, response, svc)


@router.post("/auth/logout", status_code=status.HTTP_204_NO_CONTENT, responses=errors(400, *AUTHED))
async def logout(who: SessionPrincipalDep, response: Response, svc: ServicesDep) -> Response:
    """Revoke the current session and clear its cookies."""
    await svc.accounts.logout(who)
    response.status_code = status.HTTP_204_NO_CONTENT
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response


@router.get("/me", response_model=MeOut, responses=errors(*AUTHED))
async def me(who: PrincipalDep, svc: ServicesDep) -> MeOut:
    """The user, their tier and its limits, and the token budget left."""
    user = await svc.accounts.me(who)
    tier = svc.settings.tier(user.tier)
    balance = await svc.budget.balance(user.id, user.tier)
    return MeOut(
        user=UserOut.model_validate(user, from_attributes=True),
        tier=TierOut(name=user.tier, **tier.model_dump(exclude={"downgrade_model"})),
        budget=_budget_out(balance),
        credential=who.kind.value,
    )


def _budget_out(balance: TokenBalance) -> BudgetOut:
    return BudgetOut(
        limit_tokens=balance.bucket.capacity,
        remaining_tokens=math.floor(balance.tokens),
        refill_tokens_per_minute=balance.bucket.per_minute,
        resets_in_seconds=round(balance.seconds_to_full, 3),
    )


def _logged_in(login: Login, response: Response, svc: Services) -> AuthOut:
    ttl = svc.settings.session_ttl_seconds
    secure = svc.settings.secure_cookies
    csrf = svc.accounts.csrf_token(login.session_id)
    response.set_cookie(
        SESSION_COOKIE,
        login.token,
        max_age=ttl,
        path="/",
        httponly=True,
        samesite="lax",
        secure=secure,
    )
    response.set_cookie(
        CSRF_COOKIE, csrf, max_age=ttl, path="/", httponly=False, samesite="lax", secure=secure
    )
    return AuthOut(
        token=login.token,
        csrf_token=csrf,
        expires_at=login.expires_at,
        user=UserOut.model_validate(login.user, from_attributes=True),
    )
