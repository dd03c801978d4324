"""HTTP tests run the app over ``httpx.ASGITransport`` (the ``client`` of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.helpers import user_headers


@pytest.fixture
async def auth(client: httpx.AsyncClient) -> AsyncIterator[dict[str, str]]:
    yield await user_headers(client, "ada@example.com")
