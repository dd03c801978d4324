"""The user's own chats as tools (issue 43): ``search_chats`` finds the run's user's
messages and titles — never another user's —, and ``read_message`` reads one of theirs
(from its archive when its chat is archived: search finds an archived chat by its title
only); another user's is "not found". Both stacks."""

from __future__ import annotations

import httpx

from parley.services import Services
from parley.tools.interface import ToolContext, ToolStatus
from parley.tools.own_chats import ReadMessage, SearchChats
from tests.archive.test_archive import _age
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run


async def _said(client: httpx.AsyncClient, auth: dict[str, str], text: str) -> tuple[str, str]:
    chat_id = await new_chat(client, auth)
    sent = await send_json(client, auth, chat_id, text)
    await wait_run(client, auth, sent["run_id"])
    listed = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    user_message = next(m for m in listed.json()["data"] if m["role"] == "user")
    return chat_id, user_message["id"]


def _context(user_id: str) -> ToolContext:
    return ToolContext(user_id=user_id, chat_id=None, run_id="run_x")


async def _user_id(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    me = (await client.get("/api/me", headers=auth)).json()
    return str(me["user"]["id"])


async def test_search_and_read_reach_the_users_own_chats_only(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    ada_chat, ada_message = await _said(run_client, ada, "my heron is called Gwendolyn")
    bob_chat, bob_message = await _said(run_client, bob, "bob's heron is called Basil")
    ada_id, bob_id = await _user_id(run_client, ada), await _user_id(run_client, bob)
    search = SearchChats(run_services.db, run_services.cursors)
    read = ReadMessage(run_services.db, run_services.archiver)

    found = await search.call({"query": "heron called"}, _context(ada_id))
    assert found.status is ToolStatus.OK
    assert ada_message in found.content and "Gwendolyn" in found.content
    assert bob_message not in found.content and "Basil" not in found.content
    none = await search.call({"query": "zeppelin"}, _context(ada_id))
    assert none.status is ToolStatus.OK and "no chat" in none.content
    empty = await search.call({"query": "a"}, _context(ada_id))
    assert empty.status is ToolStatus.REFUSED

    mine = await read.call({"chat_id": ada_chat, "message_id": ada_message}, _context(ada_id))
    assert mine.status is ToolStatus.OK and "my heron is called Gwendolyn" in mine.content
    theirs = await read.call({"chat_id": bob_chat, "message_id": bob_message}, _context(ada_id))
    assert theirs.status is ToolStatus.REFUSED and "Basil" not in theirs.content
    mixed = await read.call({"chat_id": ada_chat, "message_id": bob_message}, _context(ada_id))
    assert mixed.status is ToolStatus.REFUSED
    assert (await read.call({}, _context(bob_id))).status is ToolStatus.REFUSED

    await _age(run_services, ada_chat)  # archived: read from the archive
    assert (await run_services.archiver.archive_due()).archived >= 1
    kept = await read.call({"chat_id": ada_chat, "message_id": ada_message}, _context(ada_id))
    assert kept.status is ToolStatus.OK and "Gwendolyn" in kept.content
