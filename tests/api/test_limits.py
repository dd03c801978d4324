"""The request body limit (``api/limits.BodyLimit``): declared or streamed, a 413."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.helpers import assert_error


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"max_body_bytes": 4096}


async def test_body_limit_is_a_413_declared_or_streamed(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    big = {"title": "x" * 5000}
    error = assert_error(await client.post("/api/chats", json=big, headers=auth), 413)
    assert "4096" in error["message"]

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"title": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    r = await client.post(
        "/api/chats",
        content=chunks(),
        headers={**auth, "content-type": "application/json"},
    )
    assert_error(r, 413, "payload_too_large")
    assert (await client.get("/api/chats", headers=auth)).json()["data"] == []
