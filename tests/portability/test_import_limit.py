"""An import's own size limit (``portability.max_import_bytes``), apart from the body limit
of every other route."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import assert_error, user_headers


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    return {"blobs": blob_settings, "portability": {"max_import_bytes": 4096}}


async def test_an_import_over_the_size_limit_is_413(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post("/api/imports", content=b"[" + b" " * 5000 + b"]", headers=auth)
    assert_error(r, 413)
    small = await run_client.post("/api/chats", json={"title": "x" * 10}, headers=auth)
    assert small.status_code == 201  # the other routes keep their own limit
