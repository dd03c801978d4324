from __future__ import annotations

import httpx
import pytest

from tests.helpers import user_headers


@pytest.fixture
async def auth(run_client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(run_client, "ada@example.com")
