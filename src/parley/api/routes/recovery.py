"""A forgotten password: ask for a reset mail (the same answer for every email), set the new
password with the link's token (signed in, every other session ended), and an admin's
one-time link to hand over when there is no mail (``accounts/recovery.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel, EmailStr, Field

from parley.api.deps import AdminDep, ClientAddressDep, ServicesDep
from parley.api.returns import callback_url
from parley.api.routes import AUTHED, BODY, errors
from parley.api.routes.admin import actor
from parley.api.routes.auth import logged_in
from parley.api.schemas import AuthOut, Strict, Text

router = APIRouter(prefix="/api", tags=["accounts"])


class ResetRequest(Strict):
    email: Annotated[EmailStr, Field(max_length=320)]


class ResetAccepted(BaseModel):
    status: Literal["accepted"] = "accepted"
    message: str = "If an account has this email, a mail with a link is on its way."


class ResetConfirm(Strict):
    token: Annotated[str, Field(min_length=10, max_length=200)]
    password: Annotated[Text, Field(min_length=8, max_length=1024)]


class ResetLink(BaseModel):
    url: str = Field(description="Hand it to the user: it works once, until `expires_at`.")
    expires_at: datetime


@router.post(
    "/auth/password-reset",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ResetAccepted,
    responses=errors(*BODY, 409, 429, 503),
)
async def request_reset(
    body: ResetRequest, request: Request, svc: ServicesDep, client: ClientAddressDep
) -> ResetAccepted:
    """Mail a password reset link to the account with this email, if there is one — the
    answer is the same either way. 409 `mail_not_configured` where the operator set no mail
    (ask them: the admin console makes a link); 503 `mail_unavailable` while the mail
    server does not answer (try again later); 429 past a few asks."""
    await svc.accounts.recovery.request(body.email, client, callback_url(svc, request, ""))
    return ResetAccepted()


@router.post("/auth/password-reset/confirm", response_model=AuthOut, responses=errors(*BODY, 401))
async def confirm_reset(
    body: ResetConfirm, response: Response, svc: ServicesDep, client: ClientAddressDep
) -> AuthOut:
    """Set the new password with a reset link's token (422 when the password rules refuse
    it; 400 `invalid_reset_link` when used, expired or not one): every session of the
    account ends, and this answer signs it in."""
    login = await svc.accounts.recovery.reset(body.token, body.password, client)
    return logged_in(login, response, svc)


@router.post(
    "/admin/users/{user_id}/reset-link",
    response_model=ResetLink,
    responses=errors(*AUTHED, 404, 409),
)
async def reset_link(user_id: str, who: AdminDep, request: Request, svc: ServicesDep) -> ResetLink:
    """A one-time password reset link for the user, to hand over (no mail needed); 409
    `no_password` for an account that signs in through an identity provider. Audited."""
    url, expires = await svc.accounts.recovery.link_for(
        actor(who), user_id, callback_url(svc, request, "")
    )
    return ResetLink(url=url, expires_at=expires)


class ConfirmRequest(Strict):
    token: Annotated[str, Field(min_length=10, max_length=200)]


class Confirmed(BaseModel):
    status: Literal["confirmed"] = "confirmed"
    email: str


@router.post("/auth/confirm", response_model=Confirmed, responses=errors(*BODY))
async def confirm_email(body: ConfirmRequest, svc: ServicesDep) -> Confirmed:
    """Confirm an email with the mailed link's token (400 `invalid_reset_link` when used,
    expired or not one); the account may then chat (and sign in)."""
    user = await svc.accounts.recovery.confirm(body.token)
    return Confirmed(email=user.email)


@router.post(
    "/auth/confirm/resend",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ResetAccepted,
    responses=errors(*BODY, 409, 429, 503),
)
async def resend_confirmation(
    body: ResetRequest, request: Request, svc: ServicesDep, client: ClientAddressDep
) -> ResetAccepted:
    """Mail another confirmation link to the account with this email, if it has one not
    yet confirmed — the same answer either way (errors as for a password reset)."""
    await svc.accounts.recovery.resend_confirmation(
        body.email, client, callback_url(svc, request, "")
    )
    return ResetAccepted()
