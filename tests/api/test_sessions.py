"""Sessions: change the password, log out everywhere, list and end one's sessions, the
lifetime and idle timeout, and last-use tracking that costs no write per request."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update

from parley.domain import utcnow
from parley.services import Services
from parley.store.schema import ApiKey, Session
from tests.helpers import PASSWORD, assert_error, bearer, signup

NEW_PASSWORD = "a brand new passphrase 42"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # auth_cache_seconds 0: every use of an API key is looked up here, so its last-use
    # writes are seen (the cache of API keys is tested in tests/accounts/test_credential_cache)
    return {
        "session_ttl_seconds": 7 * 24 * 3600,
        "session_idle_timeout_seconds": 3600,
        "auth_cache_seconds": 0,
    }


async def _login(client: httpx.AsyncClient, email: str, password: str = PASSWORD) -> str:
    r = await client.post("/api/auth/login", json={"email": email, "password": password})
    assert r.status_code == 200, r.text
    client.cookies.clear()
    token: str = r.json()["token"]
    return token


async def _status(client: httpx.AsyncClient, token: str) -> int:
    return (await client.get("/api/me", headers=bearer(token))).status_code


async def test_changing_the_password_ends_every_other_session(client: httpx.AsyncClient) -> None:
    first = (await signup(client, "ada@example.com"))["token"]
    here = await _login(client, "ada@example.com")
    third = await _login(client, "ada@example.com")
    key = (await client.post("/api/keys", json={"name": "k"}, headers=bearer(here))).json()

    body = {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    r = await client.post("/api/auth/password", json=body, headers=bearer(here))
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "password.changed", "other_sessions_ended": 2}
    assert await _status(client, first) == 401
    assert await _status(client, third) == 401
    assert await _status(client, here) == 200  # this session goes on
    assert await _status(client, key["key"]) == 200  # API keys are revoked on their own
    wrong = {"email": "ada@example.com", "password": PASSWORD}
    assert_error(await client.post("/api/auth/login", json=wrong), 401, "invalid_login")
    await _login(client, "ada@example.com", NEW_PASSWORD)


async def test_a_password_change_needs_the_current_password_and_a_session(
    client: httpx.AsyncClient,
) -> None:
    token = (await signup(client, "ada@example.com"))["token"]
    other = await _login(client, "ada@example.com")
    body = {"current_password": "not my password", "new_password": NEW_PASSWORD}
    r = await client.post("/api/auth/password", json=body, headers=bearer(token))
    assert assert_error(r, 422, "wrong_password")["param"] == "current_password"
    assert await _status(client, other) == 200  # nothing was ended
    weak = {"current_password": PASSWORD, "new_password": "password123"}
    r = await client.post("/api/auth/password", json=weak, headers=bearer(token))
    assert assert_error(r, 422, "weak_password")["param"] == "new_password"
    key = (await client.post("/api/keys", json={"name": "k"}, headers=bearer(token))).json()
    good = {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    r = await client.post("/api/auth/password", json=good, headers=bearer(key["key"]))
    assert_error(r, 403, "session_required")
    await _login(client, "ada@example.com")  # the password is unchanged


async def test_log_out_everywhere_ends_every_session_including_this_one(
    client: httpx.AsyncClient,
) -> None:
    first = (await signup(client, "ada@example.com"))["token"]
    second = await _login(client, "ada@example.com")
    bob = (await signup(client, "bob@example.com"))["token"]
    r = await client.post("/api/auth/logout-all", headers=bearer(second))
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "sessions.ended", "ended": 2}
    assert await _status(client, first) == 401
    assert await _status(client, second) == 401
    assert await _status(client, bob) == 200  # another user's sessions are untouched


async def test_log_out_everywhere_by_cookie_clears_the_cookies(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD}
    )
    csrf = r.json()["csrf_token"]
    assert_error(await client.post("/api/auth/logout-all"), 403, "csrf_failed")
    r = await client.post("/api/auth/logout-all", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200
    cleared = r.headers.get_list("set-cookie")
    assert any(c.startswith("parley_session=") and "Max-Age=0" in c for c in cleared)
    assert_error(await client.get("/api/me"), 401)


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_a_user_lists_their_sessions_and_ends_one(client: httpx.AsyncClient) -> None:
    old = (await signup(client, "ada@example.com"))["token"]
    here = await _login(client, "ada@example.com")
    bob = (await signup(client, "bob@example.com"))["token"]
    r = await client.get("/api/sessions", headers=bearer(here))
    assert r.status_code == 200, r.text
    listed = r.json()["data"]
    assert len(listed) == 2
    assert [s["current"] for s in listed].count(True) == 1
    mine = next(s for s in listed if s["current"])
    other = next(s for s in listed if not s["current"])
    for s in listed:
        assert s["object"] == "session"
        fields = {"id", "object", "created_at", "last_used_at", "expires_at", "current"}
        assert set(s) == fields | {"user_agent", "address"}
        assert s["address"] == "127.0.0.1" and s["user_agent"].startswith("python-httpx/")
        lifetime = _when(s["expires_at"]) - _when(s["created_at"])
        assert abs(lifetime - timedelta(days=7)) < timedelta(seconds=5)  # the setting
        assert _when(s["last_used_at"]) >= _when(s["created_at"])

    # another user's session is a 404, and stays alive
    bobs = (await client.get("/api/sessions", headers=bearer(bob))).json()["data"][0]
    r = await client.delete(f"/api/sessions/{bobs['id']}", headers=bearer(here))
    assert assert_error(r, 404, "session_not_found")["param"] == "session_id"
    assert await _status(client, bob) == 200

    r = await client.delete(f"/api/sessions/{other['id']}", headers=bearer(here))
    assert r.status_code == 200
    assert r.json() == {"id": other["id"], "object": "session.deleted", "deleted": True}
    assert await _status(client, old) == 401
    assert_error(await client.delete(f"/api/sessions/{other['id']}", headers=bearer(here)), 404)
    listed = (await client.get("/api/sessions", headers=bearer(here))).json()["data"]
    assert [s["id"] for s in listed] == [mine["id"]]
    # an API key sees no sessions: managing them needs a login session
    key = (await client.post("/api/keys", json={"name": "k"}, headers=bearer(here))).json()
    assert_error(await client.get("/api/sessions", headers=bearer(key["key"])), 403)
    keys = (await client.get("/api/keys", headers=bearer(here))).json()["data"]
    assert keys[0]["last_used_at"] is not None  # keys show their last use too


async def test_a_session_unused_past_the_idle_timeout_is_refused(
    client: httpx.AsyncClient, services: Services
) -> None:
    idle = (await signup(client, "ada@example.com"))["token"]
    busy = await _login(client, "ada@example.com")
    busy_id = await _session_id(client, busy)
    async with services.db.transaction() as s:
        await s.execute(update(Session).values(last_used_at=utcnow() - timedelta(minutes=59)))
    assert await _status(client, busy) == 200  # 59 minutes unused is within the hour
    async with services.db.transaction() as s:
        await s.execute(
            update(Session)
            .where(Session.id != busy_id)
            .values(last_used_at=utcnow() - timedelta(minutes=61))
        )
    assert_error(await client.get("/api/me", headers=bearer(idle)), 401, "invalid_token")
    assert await _status(client, busy) == 200  # used a moment ago: its clock started again


async def _session_id(client: httpx.AsyncClient, token: str) -> str:
    listed = (await client.get("/api/sessions", headers=bearer(token))).json()["data"]
    current: str = next(s["id"] for s in listed if s["current"])
    return current


@contextmanager
def _updates(services: Services, table: str) -> Iterator[list[str]]:
    """The UPDATE statements on ``table`` run while the block runs."""
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith(f"UPDATE {table.upper()}"):
            seen.append(statement)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_last_use_is_written_at_most_once_a_minute(
    client: httpx.AsyncClient, services: Services
) -> None:
    token = (await signup(client, "ada@example.com"))["token"]
    key = (await client.post("/api/keys", json={"name": "k"}, headers=bearer(token))).json()
    with _updates(services, "sessions") as writes:
        for _ in range(5):
            assert await _status(client, token) == 200
    assert writes == []  # logging in counted as a use a moment ago
    with _updates(services, "api_keys") as writes:
        for _ in range(5):
            assert await _status(client, key["key"]) == 200
    assert len(writes) == 1  # the first use; the next four are within the minute

    a_while_ago = utcnow() - timedelta(minutes=2)
    async with services.db.transaction() as s:
        await s.execute(update(Session).values(last_used_at=a_while_ago))
        await s.execute(update(ApiKey).values(last_used_at=a_while_ago))
    with _updates(services, "sessions") as writes:
        for _ in range(5):
            assert await _status(client, token) == 200
    assert len(writes) == 1
    with _updates(services, "api_keys") as writes:
        for _ in range(5):
            assert await _status(client, key["key"]) == 200
    assert len(writes) == 1
    listed = (await client.get("/api/sessions", headers=bearer(token))).json()["data"]
    assert _when(listed[0]["last_used_at"]) > a_while_ago + timedelta(minutes=1)
