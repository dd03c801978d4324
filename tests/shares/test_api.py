"""Shared links (issue 21) over HTTP, on both stacks (SQLite + in-process bus, Postgres +
Redis): publish a snapshot, read it with no credentials, list and revoke links; a revoked
link or a deleted chat's is 404, and so are another user's chats and shares."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from parley.domain import MessageRole, MessageStatus, new_id, utcnow
from parley.services import Services
from parley.store.schema import Chat, Message, Share
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, send_json, wait_run


async def _chat_with_answers(
    client: httpx.AsyncClient, auth: dict[str, str], *questions: str
) -> str:
    chat_id = await new_chat(client, auth)
    for question in questions:
        sent = await send_json(client, auth, chat_id, f"/echo {question}")
        await wait_run(client, auth, sent["run_id"])
    return chat_id


async def _share(client: httpx.AsyncClient, auth: dict[str, str], chat_id: str) -> Any:
    r = await client.post(f"/api/chats/{chat_id}/shares", headers=auth)
    assert r.status_code == 201, r.text
    return r.json()


def _token(share: dict[str, Any]) -> str:
    url: str = share["url"]
    assert url.startswith("/s/")
    return url.removeprefix("/s/")


async def _public(client: httpx.AsyncClient, token: str) -> httpx.Response:
    client.cookies.clear()
    return await client.get(f"/api/shared/{token}")


async def test_a_shared_link_reads_without_credentials_as_a_snapshot(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "first question", "second question")

    share = await _share(run_client, auth, chat_id)

    assert share["id"].startswith("share_") and share["chat_id"] == chat_id
    assert share["title"] == "t" and share["message_count"] == 4 and share["created_at"]
    assert len(_token(share)) >= 32
    r = await _public(run_client, _token(share))
    assert r.status_code == 200, r.text
    assert r.headers["x-robots-tag"] == "noindex, nofollow"
    body = r.json()
    assert body["title"] == "t" and body["created_at"] == share["created_at"]
    said = [(m["role"], m["content"]) for m in body["messages"]]
    assert said == [
        ("user", "/echo first question"),
        ("assistant", "first question"),
        ("user", "/echo second question"),
        ("assistant", "second question"),
    ]
    assert body["messages"][1]["model"] and body["messages"][0]["model"] is None
    assert all(m["created_at"] for m in body["messages"])

    # later messages (and a rename) do not change the snapshot
    await _chat_with_more(run_client, auth, chat_id, "third question")
    await run_client.patch(f"/api/chats/{chat_id}", json={"title": "renamed"}, headers=auth)
    assert (await _public(run_client, _token(share))).json() == body
    # a second share is a new link with the chat as it is now
    again = await _share(run_client, auth, chat_id)
    assert _token(again) != _token(share) and again["message_count"] == 6
    assert again["title"] == "renamed"


async def _chat_with_more(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, question: str
) -> None:
    sent = await send_json(client, auth, chat_id, f"/echo {question}")
    await wait_run(client, auth, sent["run_id"])


async def test_the_page_is_escaped_noindex_and_needs_no_account(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "<script>alert(1)</script> & more")
    token = _token(await _share(run_client, auth, chat_id))
    run_client.cookies.clear()

    r = await run_client.get(f"/s/{token}")

    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-robots-tag"] == "noindex, nofollow"
    assert "script-src 'self'" in r.headers["content-security-policy"]
    page = r.text
    assert '<meta name="robots" content="noindex, nofollow">' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<script>alert" not in page
    missing = await run_client.get("/s/" + "x" * 32)
    assert missing.status_code == 404 and "does not exist" in missing.text
    assert missing.headers["x-robots-tag"] == "noindex, nofollow"


async def test_links_are_listed_newest_first_and_revoked_for_good(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "question")
    first = await _share(run_client, auth, chat_id)
    second = await _share(run_client, auth, chat_id)

    listed = (await run_client.get("/api/shares", headers=auth)).json()
    assert [s["id"] for s in listed["data"]] == [second["id"], first["id"]]
    assert listed["data"][0] == second

    r = await run_client.delete(f"/api/shares/{first['id']}", headers=auth)
    assert r.status_code == 200 and r.json() == {
        "id": first["id"],
        "object": "share.deleted",
        "deleted": True,
    }
    assert_error(await _public(run_client, _token(first)), 404, "share_not_found")
    assert (await run_client.get(f"/s/{_token(first)}")).status_code == 404
    assert (await _public(run_client, _token(second))).status_code == 200
    listed = (await run_client.get("/api/shares", headers=auth)).json()
    assert [s["id"] for s in listed["data"]] == [second["id"]]
    again = await run_client.delete(f"/api/shares/{first['id']}", headers=auth)
    assert_error(again, 404, "share_not_found")


async def test_deleting_the_chat_ends_its_links(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "question")
    share = await _share(run_client, auth, chat_id)

    assert (await run_client.delete(f"/api/chats/{chat_id}", headers=auth)).status_code == 200

    assert_error(await _public(run_client, _token(share)), 404, "share_not_found")
    assert (await run_client.get(f"/s/{_token(share)}")).status_code == 404
    assert (await run_client.get("/api/shares", headers=auth)).json()["data"] == []
    async with run_services.db.transaction() as s:
        assert list(await s.scalars(select(Share))) == []


async def test_another_users_chats_and_shares_are_404(run_client: httpx.AsyncClient) -> None:
    owner = await user_headers(run_client, "owner@example.com")
    other = await user_headers(run_client, "other@example.com")
    chat_id = await _chat_with_answers(run_client, owner, "secret")
    share = await _share(run_client, owner, chat_id)

    r = await run_client.post(f"/api/chats/{chat_id}/shares", headers=other)
    assert_error(r, 404, "chat_not_found")
    assert_error(await run_client.delete(f"/api/shares/{share['id']}", headers=other), 404)
    assert (await run_client.get("/api/shares", headers=other)).json()["data"] == []
    assert (await _public(run_client, _token(share))).status_code == 200  # still live
    for path in (f"/api/chats/{chat_id}/shares", "/api/shares", f"/api/shares/{share['id']}"):
        method = "GET" if path == "/api/shares" else ("POST" if "chats" in path else "DELETE")
        assert_error(await run_client.request(method, path), 401)


@pytest.mark.parametrize(
    "token",
    ["x", "a" * 31, "a" * 65, "%00" + "a" * 32, "a" * 31 + "%C3%A9", "a" * 32 + "%2F..", "é" * 32],
)
async def test_bad_token_shapes_are_404(run_client: httpx.AsyncClient, token: str) -> None:
    r = await run_client.get(f"/api/shared/{token}")
    assert_error(r, 404)
    assert (await run_client.get(f"/s/{token}")).status_code == 404
    assert_error(await run_client.delete("/api/shares/share_nope", headers={}), 401)


async def test_a_share_holds_only_the_branch_shown_and_what_it_shows(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "one", "two")
    async with run_services.db.transaction() as s:
        rows = list(await s.scalars(select(Message).where(Message.chat_id == chat_id)))
        rows.sort(key=lambda m: m.seq)
        for before, after in pairwise(rows):
            after.parent_id = before.id
        rows[0].parent_id = None
        chat = await s.get(Chat, chat_id)
        assert chat is not None
        user_id, top = chat.user_id, rows[-1].seq
        now = utcnow()
        # another answer to the first question (a branch not shown), and on the shown branch
        # an answer still being written, a failed one and a refused prompt
        extra = [
            (rows[0].id, MessageRole.ASSISTANT, MessageStatus.COMPLETED, "other branch"),
            (rows[-1].id, MessageRole.USER, MessageStatus.REJECTED, "refused prompt"),
            (None, MessageRole.ASSISTANT, MessageStatus.FAILED, "failed answer"),
            (None, MessageRole.ASSISTANT, MessageStatus.IN_PROGRESS, "half an answer"),
        ]
        parent = rows[-1].id
        for i, (given, role, status, content) in enumerate(extra, start=1):
            message = Message(
                id=new_id("msg"), user_id=user_id, chat_id=chat_id, seq=top + i,
                parent_id=given or parent, role=role, content=content, status=status,
                created_at=now, updated_at=now,
            )  # fmt: skip
            s.add(message)
            if given is None or role is MessageRole.USER:
                parent = message.id
        await s.flush()
        await s.execute(update(Chat).where(Chat.id == chat_id).values(active_leaf_id=parent))

    share = await _share(run_client, auth, chat_id)

    body = (await _public(run_client, _token(share))).json()
    assert [m["content"] for m in body["messages"]] == ["/echo one", "one", "/echo two", "two"]
    assert share["message_count"] == 4


async def test_an_archived_chat_is_shared_from_its_archive(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, "kept", "also kept")
    async with run_services.db.transaction() as s:
        await s.execute(
            update(Chat)
            .where(Chat.id == chat_id)
            .values(last_activity_at=utcnow() - timedelta(days=400))
        )
    assert (await run_services.archiver.archive_due()).archived == 1
    assert (await run_client.get(f"/api/chats/{chat_id}", headers=auth)).json()["archived_at"]

    share = await _share(run_client, auth, chat_id)

    body = (await _public(run_client, _token(share))).json()
    assert [m["content"] for m in body["messages"]] == [
        "/echo kept",
        "kept",
        "/echo also kept",
        "also kept",
    ]
    detail = (await run_client.get(f"/api/chats/{chat_id}", headers=auth)).json()
    assert detail["archived_at"] is not None  # sharing reads the archive, restores nothing
