"""The app factory: routes, error mapping and limits around a set of services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from parley import __version__
from parley.api.deps import audit_where
from parley.api.docs import OPENAPI_URL, docs_enabled, mount_docs
from parley.api.edge import Edge
from parley.api.error_responses import install_error_handlers
from parley.api.hsts import install_hsts
from parley.api.limits import BodyLimit
from parley.api.routes import (
    admin,
    admin_models,
    attachments,
    auth,
    branches,
    chats,
    embeddings,
    feedback,
    health,
    keys,
    metrics,
    models,
    openai,
    portability,
    recovery,
    responses,
    runs,
    search,
    shares,
    sso,
    temporary,
    tools,
)
from parley.api.routes.portability import IMPORTS_PATH
from parley.api.scim import mount_scim
from parley.api.sse import ServerSendKept
from parley.api.web import SecurityHeaders, mount_web
from parley.services import Services

# every route module's router, in the order the OpenAPI document lists them
ROUTERS = tuple(
    module.router
    for module in (
        health,
        metrics,
        auth,
        keys,
        models,
        chats,
        runs,
        attachments,
        branches,
        feedback,
        openai,
        responses,
        embeddings,
        portability,
        shares,
        search,
        tools,
        admin,
        admin_models,
        sso,
        recovery,
        temporary,
    )
)


def create_app(services: Services, *, close_services: bool = True) -> FastAPI:
    """Build the ASGI app. With ``close_services`` its lifespan starts and closes them."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if close_services:
            await services.start()
        yield
        if close_services:
            await services.close()

    docs = docs_enabled(services.settings.http)
    app = ServerSendKept(
        title="parley",
        version=__version__,
        summary="A self-hostable ChatGPT-style chat service.",
        lifespan=lifespan,
        openapi_url=OPENAPI_URL if docs else None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    install_error_handlers(app)
    for router in ROUTERS:  # each request's origin kept for the audit records it makes
        app.include_router(router, dependencies=[Depends(audit_where)])
    mount_scim(app, services)
    mount_web(app)
    if docs:
        mount_docs(app)
    imports = {IMPORTS_PATH: services.settings.portability.max_import_bytes}
    uploads = [attachments.upload_limit(services)]
    app.add_middleware(
        BodyLimit, max_bytes=services.settings.http.max_body_bytes, larger=imports, matching=uploads
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(Edge)  # request ids, 500s, no-store, relative redirects
    install_hsts(app, services.settings.http)  # outermost: Edge's own 500s carry it too
    return app
