"""Signing in with an OpenID Connect provider: the providers the sign-in page offers, the
start (to the provider, a binding cookie set), the callback (the session's cookies set,
back to the app; or back with ``?sso_error=…`` saying why not)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Cookie, Query, Request, status
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field

from parley.api.deps import ServicesDep
from parley.api.edge import OFFSITE
from parley.api.returns import back_to_app, callback_url
from parley.api.routes import errors
from parley.api.routes.auth import set_session_cookies
from parley.errors import ParleyError
from parley.services import Services

router = APIRouter(prefix="/api/auth", tags=["accounts"])

BINDING_COOKIE = "parley_sso"


class ProviderOut(BaseModel):
    name: str
    label: str


class SignInOptions(BaseModel):
    object: Literal["sign_in_options"] = "sign_in_options"
    local_passwords: bool
    password_reset_by_mail: bool = Field(
        description="Whether a forgotten password can be reset by mail here (else: the admin)."
    )
    providers: list[ProviderOut]


@router.get("/providers", response_model=SignInOptions)
async def providers(svc: ServicesDep) -> SignInOptions:
    """How one may sign in here: with a password (unless turned off), and the providers."""
    names = svc.accounts.sso.names()
    return SignInOptions(
        local_passwords=svc.settings.accounts.local_passwords,
        password_reset_by_mail=svc.settings.mail.enabled,
        providers=[ProviderOut(name=n, label=label) for n, label in names],
    )


@router.get(
    "/oidc/{provider}/start",
    status_code=status.HTTP_303_SEE_OTHER,
    response_class=RedirectResponse,
    responses={**errors(404, 503), 303: {"description": "To the provider."}},
)
async def start(provider: str, request: Request, svc: ServicesDep) -> RedirectResponse:
    """Begin signing in with a provider: to its sign-in page (404 `no_such_provider`)."""
    started = await svc.accounts.sso.start(provider, _redirect_uri(svc, request, provider))
    response = RedirectResponse(started.url, status_code=303, headers=OFFSITE)
    response.set_cookie(
        BINDING_COOKIE,
        started.binding,
        max_age=900,
        path="/api/auth/oidc",
        httponly=True,
        samesite="lax",
        secure=bool(svc.settings.http.cookie_secure),
    )
    return response


@router.get(
    "/oidc/{provider}/callback",
    status_code=status.HTTP_303_SEE_OTHER,
    response_class=RedirectResponse,
    responses={303: {"description": "Back to the app, signed in or told why not."}},
)
async def callback(
    provider: str,
    request: Request,
    svc: ServicesDep,
    code: Annotated[str, Query(max_length=4000)] = "",
    state: Annotated[str, Query(max_length=4000)] = "",
    error: Annotated[str | None, Query(max_length=200)] = None,
    binding: Annotated[str | None, Cookie(alias=BINDING_COOKIE)] = None,
) -> RedirectResponse:
    """Where the provider sends the browser back: signed in (the session's cookies set)
    and on to the app, or back to the sign-in page with `?sso_error=` saying why not (a
    refused or forged ID token, an altered, old or another browser's state, an email
    that is another account's)."""
    if error is not None or not code:
        return back_to_app(sso_error=f"the provider did not sign you in: {error or 'no code'}")
    redirect = _redirect_uri(svc, request, provider)
    try:
        login = await svc.accounts.sso.finish(provider, redirect, code, state, binding)
    except ParleyError as e:
        return back_to_app(sso_error=str(e))
    response = RedirectResponse("/", status_code=status.HTTP_303_SEE_OTHER)
    set_session_cookies(login, response, svc)
    response.delete_cookie(BINDING_COOKIE, path="/api/auth/oidc")
    return response


def _redirect_uri(svc: Services, request: Request, provider: str) -> str:
    return callback_url(svc, request, f"/api/auth/oidc/{provider}/callback")
