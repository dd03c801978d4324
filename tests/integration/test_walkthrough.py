"""The API page's curl session (docs/API.md), through the HTTP API, on each backend."""

from __future__ import annotations

import httpx

from tests.helpers import PASSWORD, assert_error, bearer


async def walkthrough(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert r.status_code == 201, r.text
    assert r.json()["user"]["tier"] == "free"

    r = await client.post(
        "/api/auth/login", json={"email": "ADA@example.com", "password": PASSWORD}
    )
    assert r.status_code == 200, r.text
    auth = bearer(r.json()["token"])
    client.cookies.clear()

    ids = []
    for title in ("first", "second", "third"):
        r = await client.post("/api/chats", json={"title": title}, headers=auth)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])

    r = await client.get("/api/chats", params={"limit": 2}, headers=auth)
    assert r.status_code == 200
    page1 = r.json()
    assert [c["title"] for c in page1["data"]] == ["third", "second"]
    assert page1["next_cursor"]
    r = await client.get(
        "/api/chats", params={"limit": 2, "cursor": page1["next_cursor"]}, headers=auth
    )
    page2 = r.json()
    assert [c["title"] for c in page2["data"]] == ["first"]
    assert page2["next_cursor"] is None

    r = await client.patch(f"/api/chats/{ids[0]}", json={"title": "renamed"}, headers=auth)
    assert r.status_code == 200
    assert r.json()["title"] == "renamed"
    r = await client.get(f"/api/chats/{ids[0]}", headers=auth)
    assert r.json()["title"] == "renamed"

    r = await client.get(f"/api/chats/{ids[0]}/messages", headers=auth)
    assert r.status_code == 200
    assert r.json() == {"object": "list", "data": [], "next_cursor": None}

    r = await client.delete(f"/api/chats/{ids[0]}", headers=auth)
    assert r.status_code == 200
    assert r.json() == {"id": ids[0], "object": "chat.deleted", "deleted": True}
    assert_error(await client.get(f"/api/chats/{ids[0]}", headers=auth), 404, "chat_not_found")
    r = await client.get("/api/chats", headers=auth)
    assert [c["title"] for c in r.json()["data"]] == ["third", "second"]


async def test_walkthrough_in_process(client: httpx.AsyncClient) -> None:
    await walkthrough(client)
