"""The API's documentation: on in development, served from the package under the app's
Content-Security-Policy; off (404) in production unless asked for."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from parley.api.web import CSP

PRODUCTION = {"environment": "production", "secret_key": "s" * 40}


async def test_docs_are_served_from_the_package_under_the_apps_policy(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-frame-options"] == "DENY"
    html = page.text
    assert "<script>" not in html and " style=" not in html  # nothing inline
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources, html
    for source in sources:
        assert source.startswith("/docs/"), source  # never a CDN
        asset = await client.get(source)
        assert asset.status_code == 200, source
        assert asset.headers["x-content-type-options"] == "nosniff"
    assert (await client.get("/openapi.json")).json()["info"]["title"] == "parley"
    assert (await client.get("/redoc")).status_code == 404  # no packaged ReDoc: not served
    assert (await client.get("/docs/../config.py")).status_code == 404
    assert (await client.get("/docs/oauth2-redirect.html")).status_code == 404


@pytest.mark.parametrize(
    "settings_overrides", [PRODUCTION, {**PRODUCTION, "api_docs": False}, {"api_docs": False}]
)
async def test_docs_are_off_in_production_by_default(
    client: httpx.AsyncClient, settings_overrides: dict[str, Any]
) -> None:
    for path in ("/openapi.json", "/docs", "/redoc", "/docs/swagger-ui-bundle.js"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get("/healthz")).status_code == 200


@pytest.mark.parametrize("settings_overrides", [{**PRODUCTION, "api_docs": True}])
async def test_production_can_turn_the_docs_on(
    client: httpx.AsyncClient, settings_overrides: dict[str, Any]
) -> None:
    assert (await client.get("/docs")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 200


async def test_every_reference_in_the_openapi_document_resolves(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return own + [r for value in node.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for item in node for r in refs(item)]
        return []

    found = refs(document)
    assert any(r.startswith("#/components/schemas/") for r in found)
    for ref in found:
        assert ref.startswith("#/"), ref  # within the document
        target: Any = document
        for part in ref.removeprefix("#/").split("/"):
            assert isinstance(target, dict) and part in target, ref  # e.g. a nested #/$defs/…
            target = target[part]
