"""FastAPI dependencies: services, the authenticated principal, CSRF, paging limits."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from parley import logs
from parley.accounts.principal import Principal
from parley.audit.context import arrived
from parley.domain import CredentialKind, KeyScope, UserRole
from parley.errors import PermissionDenied, Unauthenticated
from parley.services import Services

SESSION_COOKIE = "parley_session"
CSRF_COOKIE = "parley_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bearer_scheme = HTTPBearer(
    auto_error=False,
    description="A session token from /api/auth/login, or an API key.",
)
cookie_scheme = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    description=f"The session cookie; unsafe methods also need the {CSRF_HEADER} header.",
)


async def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


ServicesDep = Annotated[Services, Depends(services)]


async def principal(
    request: Request,
    svc: ServicesDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    cookie: Annotated[str | None, Depends(cookie_scheme)],
) -> Principal:
    who = await _authenticate(request, svc, bearer, cookie)
    _check_scope(who, request)
    request.state.principal = who  # whose request a refusal refused (metrics: its tier)
    logs.add(user_id=who.user_id)  # the rest of the request's log lines carry it
    if request.method not in SAFE_METHODS:  # before it writes: its reads stay on the primary
        await svc.reads.wrote(who.user_id)
    return who


async def _authenticate(
    request: Request,
    svc: Services,
    bearer: HTTPAuthorizationCredentials | None,
    cookie: str | None,
) -> Principal:
    if request.headers.get("authorization") is not None:
        if bearer is None or not bearer.credentials:
            raise Unauthenticated(
                "the Authorization header must be 'Bearer <token>'", code="invalid_authorization"
            )
        address = await client_address(request, svc)
        return await svc.accounts.authenticate(bearer.credentials, address)
    if cookie:
        who = await svc.accounts.authenticate(cookie)
        if request.method not in SAFE_METHODS and not svc.accounts.csrf_valid(
            who, request.headers.get(CSRF_HEADER)
        ):
            raise PermissionDenied(
                f"a request authenticated by cookie must carry the {CSRF_HEADER} header "
                "returned at login",
                code="csrf_failed",
            )
        return who
    raise Unauthenticated(
        "authentication required: send 'Authorization: Bearer <token>' or log in",
        code="missing_credentials",
    )


def scope_for(method: str, path: str) -> KeyScope | None:
    """The scope an API key needs for a request (None: no key reaches it)."""
    if path.startswith("/api/admin/"):
        return KeyScope.ADMIN
    if path in ("/api/models", "/v1/models") or path.startswith("/v1/models/"):
        return KeyScope.MODELS
    if path.startswith("/v1/"):
        return KeyScope.COMPLETIONS
    if path.startswith("/api/"):
        return KeyScope.CHATS_READ if method in SAFE_METHODS else KeyScope.CHATS_WRITE
    return None


def _check_scope(who: Principal, request: Request) -> None:
    """An API key's scopes hold for this request (403 ``insufficient_scope`` naming it)."""
    if who.scopes is None:
        return
    needed = scope_for(request.method, request.url.path)
    if needed is None or needed.value not in who.scopes:
        name = needed.value if needed else "none"
        raise PermissionDenied(
            f"this API key lacks the scope {name!r} this route needs", code="insufficient_scope"
        )


PrincipalDep = Annotated[Principal, Depends(principal)]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


async def client_address(request: Request, svc: ServicesDep) -> str | None:
    """The address of the client (what throttles count by). ``X-Forwarded-For`` is believed
    only from a peer in ``trusted_proxies``, and then only up to the nearest address that
    is no trusted proxy: everything left of it is whatever the client chose to send."""
    peer = request.client.host if request.client else None
    trusted = svc.settings.http.trusted_proxies
    if peer is None or not _trusted(peer, trusted):
        return peer
    hops = [
        hop.strip()
        for header in request.headers.getlist("x-forwarded-for")
        for hop in header.split(",")
        if hop.strip()
    ]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return _canonical(hop)
    return _canonical(hops[0]) if hops else peer


def _trusted(address: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in trusted)


def _canonical(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address[:100]  # not an address: still a key, never a trusted one


ClientAddressDep = Annotated[str | None, Depends(client_address)]


async def session_principal(who: PrincipalDep) -> Principal:
    """Routes that manage credentials take a login session, not an API key."""
    if who.kind is not CredentialKind.SESSION:
        raise PermissionDenied(
            "this route needs a login session, not an API key", code="session_required"
        )
    return who


SessionPrincipalDep = Annotated[Principal, Depends(session_principal)]


async def auditor(who: PrincipalDep) -> Principal:
    """The admin console's reading routes: an auditor's or an admin's login session, or
    their API key with the ``admin`` scope."""
    if who.role not in (UserRole.AUDITOR, UserRole.ADMIN):
        raise PermissionDenied("this route is for admins and auditors", code="admin_only")
    return who


async def admin(who: PrincipalDep) -> Principal:
    """The admin console's changing routes: an admin's login session, or their API key
    with the ``admin`` scope."""
    if who.role is not UserRole.ADMIN:
        raise PermissionDenied("this route is for admins", code="admin_only")
    return who


AuditorDep = Annotated[Principal, Depends(auditor)]
AdminDep = Annotated[Principal, Depends(admin)]


async def audit_where(request: Request, address: ClientAddressDep) -> None:
    """Where this request came from, for the audit records it makes (``audit/context``)."""
    arrived(address, request.headers.get("user-agent"))


async def page_limit(
    svc: ServicesDep,
    limit: Annotated[
        int | None, Query(ge=1, description="Page size; capped at the server's maximum.")
    ] = None,
) -> int:
    if limit is None:
        return svc.settings.http.default_page_size
    return min(limit, svc.settings.http.max_page_size)


LimitDep = Annotated[int, Depends(page_limit)]
CursorQuery = Annotated[
    str | None,
    Query(max_length=512, description="next_cursor from the previous page."),
]
