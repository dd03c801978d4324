"""The search tests' Database, on each URL `database_url` gives (SQLite, and Postgres when set)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from parley.store.database import Database


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()
