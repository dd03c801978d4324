"""Sending messages and following runs over HTTP: shared by the run (and budget) tests."""

from __future__ import annotations

from typing import Any

import httpx

from tests.waiting import eventually

JSON = {"Accept": "application/json"}


async def new_chat(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    r = await client.post("/api/chats", json={"title": "t"}, headers=auth)
    chat_id: str = r.json()["id"]
    return chat_id


async def send_json(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str = "hello", **kw: Any
) -> dict[str, Any]:
    r = await client.post(
        f"/api/chats/{chat_id}/messages", json={"content": content, **kw}, headers={**auth, **JSON}
    )
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


async def stored_message(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, message_id: str
) -> dict[str, Any]:
    r = await client.get(f"/api/chats/{chat_id}/messages", params={"limit": 100}, headers=auth)
    found: dict[str, Any] = next(m for m in r.json()["data"] if m["id"] == message_id)
    return found


async def wait_run(
    client: httpx.AsyncClient, auth: dict[str, str], run_id: str, timeout: float = 30
) -> dict[str, Any]:
    """The run once it has ended."""

    async def ended() -> dict[str, Any] | None:
        r = await client.get(f"/api/runs/{run_id}", headers=auth)
        if r.status_code in (429, 503):  # busy (a loaded machine): asked again
            return None
        assert r.status_code == 200, r.text
        run: dict[str, Any] = r.json()
        return run if run["status"] in {"completed", "cancelled", "failed", "rejected"} else None

    return await eventually(ended, f"run {run_id} to end", timeout=timeout)
