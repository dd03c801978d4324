"""MCP servers that act as the user (issue 43): OAuth 2.1 as the MCP spec describes, against
a real MCP server process with its own authorization server, both written with the ``mcp``
SDK (``tests/tools/mcp_oauth_server.py``: discovery metadata, dynamic client registration,
PKCE checked by the SDK, rotating refresh tokens). Each user connects it with their own
account; a call made for one user carries only that user's token; tokens are kept sealed
on the server; an altered, expired or another user's ``state`` is refused; a token about
to expire is refreshed; a refresh the server refuses asks the user to connect again;
disconnecting forgets the tokens. The fake engine scripts the calls. Both stacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import select

from parley.services import Services
from parley.store.tool_grants import ToolClient, ToolGrant
from tests.builders import ROOMY_TIERS
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.runs.test_tool_rounds import _replay
from tests.tools.notes_process import NotesServer


@pytest.fixture
def token_seconds() -> int:
    return 3600


@pytest.fixture
def notes(token_seconds: int, tmp_path: Path) -> Iterator[NotesServer]:
    server = NotesServer(tmp_path, token_seconds)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def run_overrides(notes: NotesServer) -> dict[str, Any]:
    tiers = {name: {**tier, "tools": ["mcp:notes"]} for name, tier in ROOMY_TIERS.items()}
    servers = [{"name": "notes", "url": notes.url, "timeout_seconds": 10, "oauth": {}}]
    return {"tiers": tiers, "default_tier": "free", "tools": {"mcp_servers": servers}}


async def connect(
    client: httpx.AsyncClient, auth: dict[str, str], user: str, *, swap_state: str | None = None
) -> httpx.Response:
    """The whole trip: connect, the authorization server's pages as a browser follows
    them (signing in as ``user``), then parley's callback; its answer."""
    r = await client.post("/api/tools/mcp/notes/connect", headers=auth)
    assert r.status_code == 200, r.text
    where = r.json()["authorization_url"]
    asked = parse_qs(urlsplit(where).query)
    assert asked["code_challenge_method"] == ["S256"] and asked["code_challenge"][0]
    assert asked["resource"][0].endswith("/mcp")
    async with httpx.AsyncClient() as browser:
        login = (await browser.get(where)).headers["location"]
        back = (await browser.get(f"{login}&user={user}")).headers["location"]
    back_url = urlsplit(back)
    query = parse_qs(back_url.query)
    if swap_state is not None:
        query["state"] = [swap_state]
    params = {k: v[0] for k, v in query.items()}
    return await client.get(back_url.path, params=params, headers=auth)


async def call(client: httpx.AsyncClient, auth: dict[str, str], tool: str) -> dict[str, Any]:
    chat = await new_chat(client, auth)
    sent = await send_json(client, auth, chat, f"/call notes__{tool} {{}}", tools=["mcp:notes"])
    run = await wait_run(client, auth, sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    seen = await _replay(client, auth, sent["run_id"])
    (result,) = [e.data for e in seen if e.event == "tool_result"]
    return result


async def refused_send(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    chat = await new_chat(client, auth)
    r = await client.post(
        f"/api/chats/{chat}/messages",
        json={"content": "/call notes__whoami {}", "tools": ["mcp:notes"]},
        headers={**auth, "Accept": "application/json"},
    )
    assert (r.status_code, r.json()["error"]["code"]) == (409, "tool_not_connected"), r.text


async def tools_of(client: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, str]:
    r = await client.get("/api/tools", headers=auth)
    assert r.status_code == 200, r.text
    return {t["name"]: t["connection"] for t in r.json()["data"]}


@pytest.mark.parametrize("token_seconds", [3600, 1], ids=["long-tokens", "expiring-tokens"])
async def test_each_user_connects_and_calls_with_their_own_token(
    run_client: httpx.AsyncClient, run_services: Services, notes: NotesServer
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    assert await tools_of(run_client, ada) == {"mcp:notes": "not_connected"}
    await refused_send(run_client, ada)  # not connected: a send choosing it is told to connect

    r = await connect(run_client, ada, "ada")
    assert (r.status_code, r.headers["location"]) == (303, "/?connected=notes"), r.text
    assert await tools_of(run_client, ada) == {"mcp:notes": "connected"}
    assert await tools_of(run_client, bob) == {"mcp:notes": "not_connected"}
    assert (await connect(run_client, bob, "bob")).headers["location"] == "/?connected=notes"

    said = [(await call(run_client, who, "whoami"))["preview"] for who in (ada, bob, ada)]
    assert said == ["you are ada", "you are bob", "you are ada"]
    stats = (await call(run_client, bob, "stats"))["preview"]
    assert "seen=ada,bob,ada" in stats, stats
    if notes.expiring:  # every call found its token about to expire: refreshed first
        assert "refreshed=0" not in stats, stats

    async with run_services.db.transaction() as s:
        grants = list(await s.scalars(select(ToolGrant)))
        clients = list(await s.scalars(select(ToolClient)))
    assert len(grants) == 2 and len(clients) == 1  # one registration, a grant per user
    for sealed in [g.sealed for g in grants] + [c.sealed for c in clients]:
        assert "access_token" not in sealed and "refresh_token" not in sealed  # no clear text
        assert "client_id" not in sealed


async def test_a_state_that_is_altered_or_another_users_is_refused(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.post("/api/tools/mcp/notes/connect", headers=ada)
    adas_state = parse_qs(urlsplit(r.json()["authorization_url"]).query)["state"][0]

    stolen = await connect(run_client, bob, "bob", swap_state=adas_state)
    assert stolen.status_code == 303
    assert "another+user" in stolen.headers["location"], stolen.headers["location"]
    altered = await connect(run_client, bob, "bob", swap_state=adas_state[:-4] + "AAAA")
    assert "not+valid" in altered.headers["location"], altered.headers["location"]
    assert await tools_of(run_client, bob) == {"mcp:notes": "not_connected"}
    assert await tools_of(run_client, ada) == {"mcp:notes": "not_connected"}

    r = await run_client.post("/api/tools/mcp/nothing/connect", headers=ada)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "no_such_server")


async def test_a_refused_refresh_asks_to_connect_again_and_disconnect_forgets(
    run_client: httpx.AsyncClient, notes: NotesServer
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    assert (await connect(run_client, ada, "ada")).headers["location"] == "/?connected=notes"
    assert (await call(run_client, ada, "whoami"))["preview"] == "you are ada"

    notes.stop()  # a new server process: every token it issued is unknown to it
    notes.start()
    after = await call(run_client, ada, "whoami")  # (its tool list is still cached)
    assert after["status"] == "refused" and "connect it again" in after["preview"], after
    assert await tools_of(run_client, ada) == {"mcp:notes": "not_connected"}

    assert (await connect(run_client, ada, "ada")).headers["location"] == "/?connected=notes"
    assert (await call(run_client, ada, "whoami"))["preview"] == "you are ada"
    r = await run_client.delete("/api/tools/mcp/notes/connection", headers=ada)
    assert r.status_code == 204, r.text
    assert await tools_of(run_client, ada) == {"mcp:notes": "not_connected"}
    await refused_send(run_client, ada)
    r = await run_client.delete("/api/tools/mcp/notes/connection", headers=ada)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_connected")
