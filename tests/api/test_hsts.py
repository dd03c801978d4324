"""Strict-Transport-Security: sent on every response when the public URL is https."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

HSTS = "max-age=31536000; includeSubDomains"


@pytest.fixture(params=["https://chat.example.com", "http://chat.example.com", None])
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {"public_url": request.param}


async def test_hsts_follows_the_public_url(
    client: httpx.AsyncClient, settings_overrides: dict[str, Any]
) -> None:
    https = (settings_overrides["public_url"] or "").startswith("https://")
    for path in ("/healthz", "/", "/static/app.css", "/api/me", "/api/nope"):
        r = await client.get(path)
        assert r.headers.get("strict-transport-security") == (HSTS if https else None), path
