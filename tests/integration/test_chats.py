"""Chats and history: ordering, paging, validation, limits, deletion."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.api.state import Services
from parley.domain import MessageRole, MessageStatus, utcnow
from parley.store import chats
from parley.store.database import Database
from parley.store.schema import Message
from tests.helpers import assert_error, user_headers


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "max_body_bytes": 4096,
        "max_title_chars": 50,
        "max_page_size": 5,
        "default_page_size": 5,
    }


@pytest.fixture
async def auth(client: httpx.AsyncClient) -> AsyncIterator[dict[str, str]]:
    yield await user_headers(client, "ada@example.com")


async def _add_messages(services: Services, user_id: str, chat_id: str, n: int) -> None:
    async with services.db.transaction() as s:
        for i in range(n):
            now = utcnow()
            await chats.add_message(
                s,
                Message(
                    id=chats.new_message_id(),
                    user_id=user_id,
                    chat_id=chat_id,
                    role=MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT,
                    content=f"message {i}",
                    status=MessageStatus.COMPLETED,
                    created_at=now,
                    updated_at=now,
                ),
            )


async def _me(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    user_id: str = (await client.get("/api/me", headers=auth)).json()["user"]["id"]
    return user_id


async def test_list_pages_cover_every_chat_once_newest_activity_first(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services
) -> None:
    created = []
    for i in range(12):
        r = await client.post("/api/chats", json={"title": f"chat {i}"}, headers=auth)
        created.append(r.json()["id"])
    # activity in chat 3 moves it to the top
    await _add_messages(services, await _me(client, auth), created[3], 1)

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 5}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/api/chats", params=params, headers=auth)).json()
        pages += 1
        assert len(body["data"]) <= 5
        seen += [c["id"] for c in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    expected = [created[3]] + [c for c in reversed(created) if c != created[3]]
    assert seen == expected


async def test_page_size_is_capped_and_defaults(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    for _ in range(7):
        await client.post("/api/chats", json={}, headers=auth)
    body = (await client.get("/api/chats", params={"limit": 1000}, headers=auth)).json()
    assert len(body["data"]) == 5 and body["next_cursor"]
    assert_error(await client.get("/api/chats", params={"limit": 0}, headers=auth), 422)
    assert_error(await client.get("/api/chats", params={"limit": "x"}, headers=auth), 422)


@pytest.mark.parametrize("cursor", ["garbage", "W10", "WyJ4IiwiYiJd", "WzFd", "!!!"])
async def test_bad_cursor_is_a_clear_400(
    client: httpx.AsyncClient, auth: dict[str, str], cursor: str
) -> None:
    r = await client.get("/api/chats", params={"cursor": cursor}, headers=auth)
    error = assert_error(r, 400, "invalid_cursor")
    assert error["param"] == "cursor"


async def test_messages_page_newest_first_and_oldest_first(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services
) -> None:
    chat = (await client.post("/api/chats", json={}, headers=auth)).json()
    await _add_messages(services, await _me(client, auth), chat["id"], 7)

    async def collect(order: str) -> list[str]:
        out: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 3, "order": order}
            if cursor:
                params["cursor"] = cursor
            r = await client.get(f"/api/chats/{chat['id']}/messages", params=params, headers=auth)
            assert r.status_code == 200, r.text
            out += [m["content"] for m in r.json()["data"]]
            cursor = r.json()["next_cursor"]
            if cursor is None:
                return out

    oldest_first = [f"message {i}" for i in range(7)]
    assert await collect("asc") == oldest_first
    assert await collect("desc") == oldest_first[::-1]
    got = (await client.get(f"/api/chats/{chat['id']}", headers=auth)).json()
    assert got["message_count"] == 7
    assert_error(
        await client.get(f"/api/chats/{chat['id']}/messages", params={"order": "x"}, headers=auth),
        422,
    )


async def test_delete_removes_the_chat_and_its_messages(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services
) -> None:
    keep = (await client.post("/api/chats", json={"title": "keep"}, headers=auth)).json()
    gone = (await client.post("/api/chats", json={"title": "gone"}, headers=auth)).json()
    user_id = await _me(client, auth)
    await _add_messages(services, user_id, keep["id"], 2)
    await _add_messages(services, user_id, gone["id"], 3)
    assert (await client.delete(f"/api/chats/{gone['id']}", headers=auth)).status_code == 200
    assert_error(await client.get(f"/api/chats/{gone['id']}/messages", headers=auth), 404)
    assert_error(await client.delete(f"/api/chats/{gone['id']}", headers=auth), 404)
    r = await client.get(f"/api/chats/{keep['id']}/messages", headers=auth)
    assert len(r.json()["data"]) == 2


async def test_titles_are_validated(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    r = await client.post("/api/chats", json={}, headers=auth)
    assert r.status_code == 201 and r.json()["title"] == "New chat"
    chat_id = r.json()["id"]
    r = await client.post("/api/chats", json={"title": "  spaced \n out  "}, headers=auth)
    assert r.json()["title"] == "spaced out"

    error = assert_error(
        await client.post("/api/chats", json={"title": "x" * 51}, headers=auth),
        422,
        "title_too_long",
    )
    assert error["param"] == "title" and "50" in error["message"]
    for bad in ({"title": "   "}, {"title": ""}, {}, {"title": None}, {"title": 5}):
        assert_error(await client.patch(f"/api/chats/{chat_id}", json=bad, headers=auth), 422)
    assert_error(
        await client.patch(f"/api/chats/{chat_id}", json={"title": "a\u0000b"}, headers=auth), 422
    )
    assert_error(
        await client.post("/api/chats", json={"title": "x", "extra": 1}, headers=auth), 422
    )
    r = await client.get(f"/api/chats/{chat_id}", headers=auth)
    assert r.json()["title"] == "New chat"  # nothing was changed by the failures


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


async def test_malformed_requests_get_clear_errors(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    r = await client.post(
        "/api/chats", content=b"{not json", headers={**auth, "content-type": "application/json"}
    )
    assert_error(r, 400, "invalid_json")
    assert_error(await client.get("/api/nope", headers=auth), 404)
    r = await client.put("/api/chats", headers=auth)
    assert_error(r, 405)
    assert r.headers["allow"] == "GET, POST"
    r = await client.post("/api/auth/signup", json={"email": "not-an-email", "password": "x" * 10})
    assert assert_error(r, 422)["param"] == "email"
    r = await client.post("/api/auth/signup", json={"email": "b@example.com", "password": "short"})
    assert assert_error(r, 422)["param"] == "password"
    r = await client.post(
        "/api/auth/signup", json={"email": "ADA@example.com", "password": "long enough pw"}
    )
    assert_error(r, 409, "email_taken")


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {
        "status": "ready",
        "checks": {"store": "ok", "bus": "ok"},
    }


async def test_readiness_reports_a_dead_store(
    client: httpx.AsyncClient, services: Services, tmp_path: Path
) -> None:
    url = services.db.engine.url
    # a directory is no SQLite database; nothing listens on port 1
    broken = (
        url.set(port=1)
        if url.get_backend_name() == "postgresql"
        else url.set(database=str(tmp_path))
    )
    await services.db.dispose()
    services.db = Database(broken.render_as_string(hide_password=False))
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "not_ready"
    assert r.json()["checks"]["store"].startswith("error")
