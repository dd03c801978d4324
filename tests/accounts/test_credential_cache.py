"""The cache of API keys a process has checked: a busy program's requests are not each a
database read, a revocation here takes effect at once, and one made elsewhere within
``auth_cache_seconds``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update

from parley.domain import utcnow
from parley.services import Services
from parley.store.schema import ApiKey
from tests.helpers import bearer, signup
from tests.waiting import eventually

TTL = 1.0


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"auth_cache_seconds": TTL}


@contextmanager
def _key_lookups(services: Services) -> Iterator[list[str]]:
    """The statements that read the api_keys table while the block runs."""
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.split()).upper()
        if text.startswith("SELECT") and "FROM API_KEYS" in text:
            seen.append(statement)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def _key(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    session = (await signup(client, "ada@example.com"))["token"]
    key = (await client.post("/api/keys", json={"name": "k"}, headers=bearer(session))).json()
    return session, key


async def _status(client: httpx.AsyncClient, secret: str) -> int:
    return (await client.get("/v1/models", headers=bearer(secret))).status_code


async def test_a_key_in_use_is_looked_up_once(
    client: httpx.AsyncClient, services: Services
) -> None:
    _, key = await _key(client)
    with _key_lookups(services) as lookups:
        for _ in range(5):
            assert await _status(client, key["key"]) == 200
    assert len(lookups) == 1


async def test_revoking_a_key_here_takes_effect_at_once(client: httpx.AsyncClient) -> None:
    session, key = await _key(client)
    assert await _status(client, key["key"]) == 200
    r = await client.delete(f"/api/keys/{key['id']}", headers=bearer(session))
    assert r.status_code == 200, r.text
    assert await _status(client, key["key"]) == 401


async def test_a_key_revoked_elsewhere_is_refused_within_the_cache_time(
    client: httpx.AsyncClient, services: Services
) -> None:
    _, key = await _key(client)
    assert await _status(client, key["key"]) == 200
    async with services.db.transaction() as s:  # as another process would
        await s.execute(update(ApiKey).values(revoked_at=utcnow()))

    async def refused() -> bool:
        return await _status(client, key["key"]) == 401

    await eventually(refused, "the revoked key to be refused", timeout=TTL + 5)
