"""The API's documentation: ``/openapi.json`` and Swagger UI at ``/docs``.

Swagger UI's files come from the installed ``swagger-ui-bundle-v2`` package (never a CDN,
so /docs works offline too) and the page is served under the app's Content-Security-Policy
(``script-src 'self'``: the page's own start-up script is a file as well, not inline). There
is no packaged ReDoc, so ``/redoc`` is not served. All of it is off by default in
production (``api_docs``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response

from parley.api.settings import HttpSettings
from parley.api.web import PAGE_HEADERS
from parley.errors import NotFound

OPENAPI_URL = "/openapi.json"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>parley API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/start.js"></script>
</body>
</html>
"""

START = f"""window.ui = SwaggerUIBundle({{
  url: "{OPENAPI_URL}",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
}});
"""

ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript"}


def docs_enabled(settings: HttpSettings) -> bool:
    """``api_docs``: on in development, off in production unless set (the root decides)."""
    return bool(settings.api_docs)


def swagger_ui_dir() -> Path:
    bundle = importlib.import_module("swagger_ui_bundle")
    return Path(str(bundle.swagger_ui_path))


def mount_docs(app: FastAPI) -> None:
    """``/docs`` and the files it loads; the OpenAPI document is FastAPI's own route."""
    assets = swagger_ui_dir()
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    async def docs() -> HTMLResponse:
        return HTMLResponse(PAGE, headers=PAGE_HEADERS)

    @router.get("/docs/start.js")
    async def start() -> Response:
        return Response(START, media_type="text/javascript", headers=PAGE_HEADERS)

    @router.get("/docs/{name}")
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise NotFound("no such file")
        return FileResponse(assets / name, media_type=ASSETS[name], headers=PAGE_HEADERS)

    app.include_router(router)
