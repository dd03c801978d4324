"""Chats and history: ordering, paging, validation, deletion."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.domain import MessageRole, MessageStatus, utcnow
from parley.services import Services
from parley.store import chats
from parley.store.schema import Message
from tests.helpers import assert_error


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "max_title_chars": 50,
        "max_page_size": 5,
        "default_page_size": 5,
    }


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
