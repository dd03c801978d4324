"""Run tests execute on the two real shapes of a deployment (the ``run_*`` fixtures of
``tests/conftest.py``): SQLite with the in-process bus, and Postgres with Redis. The fake
engine is fast and deterministic here."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import user_headers


@pytest.fixture
async def auth(run_client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(run_client, "ada@example.com")
