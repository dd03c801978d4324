"""Accounts: sign up, log in, log out (here or everywhere), change the password, the
user's sessions, who am I."""

from __future__ import annotations

import math
from dataclasses import asdict

from fastapi import APIRouter, Request, Response, status

from parley.accounts.login import Login
from parley.accounts.preferences import UNCHANGED, Preferences
from parley.accounts.settings import ConfirmEmail
from parley.api.account_schemas import ChallengeOut, ConfirmFirst, PreferencesIn
from parley.api.deps import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    ClientAddressDep,
    PrincipalDep,
    ServicesDep,
    SessionPrincipalDep,
)
from parley.api.instructions import screened
from parley.api.returns import callback_url
from parley.api.routes import AUTHED, BODY, errors
from parley.api.schemas import (
    AuthOut,
    BudgetOut,
    Credentials,
    Deleted,
    LoginRequest,
    MeOut,
    PasswordChange,
    PasswordChanged,
    SessionList,
    SessionOut,
    SessionsEnded,
    TierOut,
    UserOut,
)
from parley.bus.interface import TokenBalance
from parley.errors import ValidationFailed
from parley.outages import OUTAGE_EXCEPTIONS
from parley.services import Services

router = APIRouter(prefix="/api", tags=["accounts"])


@router.post(
    "/auth/signup",
    status_code=status.HTTP_201_CREATED,
    response_model=AuthOut | ConfirmFirst,
    responses={**errors(*BODY, 403, 409, 429), 202: {"model": ConfirmFirst}},
)
async def signup(
    body: Credentials,
    request: Request,
    response: Response,
    svc: ServicesDep,
    client: ClientAddressDep,
) -> AuthOut | ConfirmFirst:
    """Create an account on the default tier and log it in. The password must not be a
    common one, the email or blank (422 `weak_password`); sign-ups from one address are
    limited (429 `too_many_signups`), and past a few need a solved proof-of-work (403
    `challenge_required`: send `altcha`). Where the operator wants emails confirmed a link
    is mailed; with `confirm_email = "signin"` the answer is 202 `confirm_email` (no
    session until the link is followed)."""
    base = callback_url(svc, request, "")
    login = await svc.accounts.signup(body.email, body.password, client, body.altcha, base)
    if svc.settings.accounts.confirm_email is ConfirmEmail.SIGNIN:
        response.status_code = status.HTTP_202_ACCEPTED
        return ConfirmFirst()
    return logged_in(login, response, svc)


@router.post("/auth/login", response_model=AuthOut, responses=errors(*BODY, 401, 403, 429))
async def login(
    body: LoginRequest, response: Response, svc: ServicesDep, client: ClientAddressDep
) -> AuthOut:
    """Log in: returns the token and sets it as an HttpOnly cookie. After a few failures
    (for the account, or from the address) it first needs a solved proof-of-work (403
    `challenge_required`: send `altcha`)."""
    result = await svc.accounts.login(body.email, body.password, client, body.altcha)
    return logged_in(result, response, svc)


@router.get("/auth/challenge", response_model=ChallengeOut, responses=errors())
async def challenge(svc: ServicesDep) -> ChallengeOut:
    """A proof-of-work challenge (ALTCHA's scheme), for a sign-in or sign-up that answered
    403 `challenge_required`; solvable for `accounts.challenge_seconds`, once."""
    return ChallengeOut(**asdict(svc.accounts.proof.issue()))


@router.post("/auth/logout", status_code=status.HTTP_204_NO_CONTENT, responses=errors(400, *AUTHED))
async def logout(who: SessionPrincipalDep, response: Response, svc: ServicesDep) -> Response:
    """Revoke the current session and clear its cookies."""
    await svc.accounts.logout(who)
    response.status_code = status.HTTP_204_NO_CONTENT
    clear_cookies(response)
    return response


@router.post("/auth/logout-all", response_model=SessionsEnded, responses=errors(*AUTHED))
async def logout_everywhere(
    who: SessionPrincipalDep, response: Response, svc: ServicesDep
) -> SessionsEnded:
    """End every session of the user, this one included (API keys are revoked apart)."""
    ended = await svc.accounts.logout_everywhere(who)
    clear_cookies(response)
    return SessionsEnded(ended=ended)


@router.post(
    "/auth/password", response_model=PasswordChanged, responses=errors(*AUTHED, *BODY, 429)
)
async def change_password(
    body: PasswordChange, who: SessionPrincipalDep, svc: ServicesDep, client: ClientAddressDep
) -> PasswordChanged:
    """Change the password: needs the current one (422 `wrong_password`; guesses are
    throttled as logins are). Every other session of the user ends; this one goes on."""
    ended = await svc.accounts.change_password(
        who, body.current_password, body.new_password, client
    )
    return PasswordChanged(other_sessions_ended=ended)


@router.get("/sessions", response_model=SessionList, responses=errors(*AUTHED))
async def list_sessions(who: SessionPrincipalDep, svc: ServicesDep) -> SessionList:
    """The user's live sessions, most recently used first."""
    rows = await svc.accounts.list_sessions(who)
    return SessionList(
        data=[
            SessionOut(
                id=row.id,
                created_at=row.created_at,
                last_used_at=row.last_used_at or row.created_at,
                expires_at=row.expires_at,
                current=row.id == who.credential_id,
                user_agent=row.user_agent,
                address=row.address,
            )
            for row in rows
        ]
    )


@router.delete("/sessions/{session_id}", response_model=Deleted, responses=errors(*AUTHED, 404))
async def end_session(
    session_id: str, who: SessionPrincipalDep, response: Response, svc: ServicesDep
) -> Deleted:
    """End one of the user's sessions (this one too: then its cookies are cleared)."""
    await svc.accounts.end_session(who, session_id)
    if session_id == who.credential_id:
        clear_cookies(response)
    return Deleted(id=session_id, object="session.deleted")


def clear_cookies(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")


@router.get("/me", response_model=MeOut, responses=errors(*AUTHED))
async def me(who: PrincipalDep, svc: ServicesDep) -> MeOut:
    """The user, their tier and its limits, and the token budget left."""
    user = await svc.accounts.me(who)
    tier = svc.settings.qos.tier(user.tier)
    try:
        budget: BudgetOut | None = _budget_out(await svc.budget.balance(user.id, user.tier))
    except OUTAGE_EXCEPTIONS:  # the bus is down: the account reads on, without its budget
        budget = None
    return MeOut(
        user=UserOut.model_validate(user, from_attributes=True),
        tier=TierOut(name=user.tier, **tier.model_dump(exclude={"downgrade_model"})),
        budget=budget,
        credential=who.kind.value,
    )


@router.patch("/me", response_model=UserOut, responses=errors(*AUTHED, *BODY))
async def preferences(body: PreferencesIn, who: SessionPrincipalDep, svc: ServicesDep) -> UserOut:
    """The user's preferences, for every device: `theme` (`system`, `light` or `dark`) and
    `instructions` (custom instructions every answer heeds)."""
    change = Preferences(body.theme, await screened(svc, who, body.instructions))
    if change == UNCHANGED:
        raise ValidationFailed("nothing to change", code="empty_change", param="theme")
    user = await svc.accounts.me(who, change)
    return UserOut.model_validate(user, from_attributes=True)


def _budget_out(balance: TokenBalance) -> BudgetOut:
    return BudgetOut(
        limit_tokens=balance.bucket.capacity,
        remaining_tokens=math.floor(balance.tokens),
        refill_tokens_per_minute=balance.bucket.per_minute,
        resets_in_seconds=round(balance.seconds_to_full, 3),
    )


def logged_in(login: Login, response: Response, svc: Services) -> AuthOut:
    csrf = set_session_cookies(login, response, svc)
    return AuthOut(
        token=login.token,
        csrf_token=csrf,
        expires_at=login.expires_at,
        user=UserOut.model_validate(login.user, from_attributes=True),
    )


def set_session_cookies(login: Login, response: Response, svc: Services) -> str:
    """The session's cookie (HttpOnly) and its CSRF token's (readable); the CSRF token."""
    ttl = svc.settings.accounts.session_ttl_seconds
    secure = bool(svc.settings.http.cookie_secure)
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
    return csrf
