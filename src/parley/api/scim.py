"""``/scim/v2``: SCIM 2.0 for identity providers (Entra ID, Okta) to provision accounts and
groups. scim2-server speaks the protocol (routes, filters, PATCH, ETags, errors as SCIM
Error documents); ``scim/storage.py`` keeps its resources and ``scim/provisioning.py`` turns
them into accounts. Mounted only when ``scim.token`` is set; every request but the service
provider configuration needs that bearer token, compared in constant time."""

from __future__ import annotations

import hmac
from typing import Any, cast

from fastapi import FastAPI
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    ETag,
    External,
    Filter,
    Patch,
    Reference,
    ScimProvider,
    ServiceProviderConfig,
    Sort,
    UnauthorizedException,
)
from scim2_server.applications.asgi import ASGIApplication, Receive, Scope, Send
from scim2_server.requests import ScimRequest
from scim2_server.utils import load_default_resource_types, load_default_schemas
from starlette.requests import Request
from starlette.types import ASGIApp

from parley.api.deps import client_address
from parley.api.routes.admin import management
from parley.api.routes.portability import delete_user_data
from parley.audit.context import arrived
from parley.scim.provisioning import Provisioning
from parley.scim.settings import ScimSettings
from parley.scim.storage import AccountsStorage
from parley.services import Services

PREFIX = "/scim"
BEARER = AuthenticationScheme(
    type=AuthenticationScheme.Type.oauthbearertoken,
    name="Bearer token",
    description="The token set in parley's scim.token",
    spec_uri=Reference[External]("https://datatracker.ietf.org/doc/html/rfc6750"),
    primary=True,
)


class ScimApp(ASGIApplication):
    def __init__(self, svc: Services, storage: AccountsStorage, provider: ScimProvider) -> None:
        super().__init__(storage, provider)
        self._svc = svc
        token = svc.settings.scim.token
        assert token is not None
        self._token = token.get_secret_value().encode()

    def check_auth(self, request: ScimRequest) -> None:
        scheme, _, token = (request.header("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self._token):
            raise UnauthorizedException

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            arrived(await client_address(request, self._svc), request.headers.get("user-agent"))
        await super().__call__(scope, receive, send)


def mount_scim(app: FastAPI, svc: Services) -> None:
    settings = svc.settings.scim
    if settings.token is None:
        return
    manage = management(svc)

    async def erase(user_id: str) -> None:
        await delete_user_data(svc, user_id)

    provisioning = Provisioning(
        settings, manage, svc.accounts, svc.settings.qos.default_tier, erase
    )
    provider = scim_provider(settings)
    scim = ScimApp(svc, AccountsStorage(svc.db, provider, provisioning), provider)
    app.mount(PREFIX, cast(ASGIApp, scim))


def scim_provider(settings: ScimSettings) -> ScimProvider:
    """The RFC 7643 User (with the enterprise extension) and Group, and what this server
    does: PATCH, filters, sorting, ETags, password changes; no bulk requests."""
    config = ServiceProviderConfig(
        patch=Patch(supported=True),
        bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
        filter=Filter(supported=True, max_results=settings.max_results),
        change_password=ChangePassword(supported=True),
        sort=Sort(supported=True),
        etag=ETag(supported=True),
        authentication_schemes=[BEARER],
    )
    schemas: Any = load_default_schemas().values()
    return ScimProvider.from_discovery(schemas, load_default_resource_types().values(), config)
