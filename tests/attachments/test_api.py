"""Attachments through the HTTP API (issue 21), on both run stacks (SQLite + the in-process
bus, Postgres + Redis) and both blob stores (a directory, a real S3 server): files told
apart by content, refused ones leaving nothing behind,
another user's ids a 404, removal before sending, and the text in the prompt the model
gets (the fake engine echoes a message that starts with ``/echo ``, files and all)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from parley.archive.archiver import user_prefix
from parley.services import Services
from parley.store import attachments as attachment_rows
from parley.store.schema import Attachment, Message
from tests.attachments.pdfs import pdf_bytes
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run

MAX_BYTES = 100_000
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    """On each blob store: a directory, and a real S3 server (SeaweedFS)."""
    return {
        "fake_engine": {"inter_token_latency_ms": 0, "context_window": 2500},
        "attachments": {"max_bytes": MAX_BYTES, "max_files": 3},
        "blobs": blob_settings,
    }


async def upload(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, name: str, data: bytes
) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/attachments",
        params={"filename": name},
        content=data,
        headers={**auth, "Content-Type": "application/octet-stream"},
    )


async def uploaded(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, name: str, data: bytes
) -> dict[str, Any]:
    r = await upload(client, auth, chat_id, name, data)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def answer(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, content: str, ids: list[str]
) -> tuple[str, dict[str, Any]]:
    sent = await send_json(client, auth, chat_id, content, attachment_ids=ids, max_tokens=500)
    run = await wait_run(client, auth, sent["run_id"])
    assert run["status"] == "completed", run
    said = await stored_message(client, auth, chat_id, sent["message_id"])
    return said["content"], sent


async def stored(services: Services, user_id: str) -> tuple[int, list[str]]:
    """The user's attachment rows and blob objects."""
    async with services.db.transaction() as s:
        rows = await s.scalar(
            select(func.count()).select_from(Attachment).where(Attachment.user_id == user_id)
        )
    keys = [b.key for b in await services.archiver.blobs.list(user_prefix(user_id))]
    return rows or 0, keys


async def me(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    user_id: str = (await client.get("/api/me", headers=auth)).json()["user"]["id"]
    return user_id


async def test_a_text_file_and_a_pdf_enter_the_prompt_named(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    notes = await uploaded(run_client, auth, chat_id, "notes.md", b"# Plan\nShip on Friday.\n")
    report = pdf_bytes([["Quarterly report", "Revenue grew 12 percent"], ["Costs fell."]])
    pdf = await uploaded(run_client, auth, chat_id, "dir/report.pdf", report)
    assert (notes["name"], notes["media_type"], notes["size"]) == ("notes.md", "text/markdown", 23)
    assert (pdf["name"], pdf["media_type"], pdf["message_id"]) == ("report.pdf", PDF, None)

    said, sent = await answer(
        run_client, auth, chat_id, "/echo what do they say?", [notes["id"], pdf["id"]]
    )
    for part in ("File: notes.md", "Ship on Friday.", "File: report.pdf", "grew 12 percent"):
        assert part in said, said

    question = await stored_message(run_client, auth, chat_id, sent["user_message_id"])
    assert question["content"] == "/echo what do they say?"  # the files ride beside it
    shown = [(a["id"], a["name"], a["size"]) for a in question["attachments"]]
    assert shown == [(notes["id"], "notes.md", 23), (pdf["id"], "report.pdf", len(report))]
    listed = (await run_client.get(f"/api/chats/{chat_id}/attachments", headers=auth)).json()
    assert {a["message_id"] for a in listed["data"]} == {sent["user_message_id"]}
    user_id = await me(run_client, auth)
    rows, keys = await stored(run_services, user_id)
    prefix = f"{user_prefix(user_id)}attachments/{chat_id}/"
    assert rows == 2 and sorted(keys) == sorted(prefix + a for a in (notes["id"], pdf["id"]))


PDF = "application/pdf"


@pytest.mark.parametrize(
    ("name", "data", "status", "code"),
    [
        ("empty.txt", b"", 400, "empty_file"),
        ("blank.txt", b" \n\t\n", 400, "empty_file"),
        ("big.txt", b"a" * (MAX_BYTES + 1), 413, "payload_too_large"),
        ("image.txt", PNG, 415, "unsupported_file_type"),  # named as text: still binary
        ("latin1.md", "café crème".encode("latin-1"), 415, "unsupported_file_type"),
        ("nul.py", b"print(1)\x00\x00", 415, "unsupported_file_type"),
        ("locked.pdf", pdf_bytes([["secret"]], password="pw"), 415, "encrypted_pdf"),
        ("scan.pdf", pdf_bytes([[]]), 400, "pdf_without_text"),
        ("broken.pdf", b"%PDF-1.7\nnot really a pdf", 400, "unreadable_pdf"),
    ],
)
async def test_a_bad_file_is_refused_clearly_and_leaves_nothing(
    run_client: httpx.AsyncClient,
    run_services: Services,
    name: str,
    data: bytes,
    status: int,
    code: str,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    assert_error(await upload(run_client, auth, chat_id, name, data), status, code)
    assert await stored(run_services, await me(run_client, auth)) == (0, [])


async def test_an_upload_whose_row_fails_deletes_its_object(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)

    async def broken(*_: object) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(attachment_rows, "add", broken)
    r = await upload(run_client, auth, chat_id, "a.txt", b"some text")
    assert r.status_code == 500
    assert await stored(run_services, await me(run_client, auth)) == (0, [])


async def test_another_users_chat_and_files_do_not_exist_for_them(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    adas_chat = await new_chat(run_client, ada)
    adas_file = await uploaded(run_client, ada, adas_chat, "a.txt", b"ada's secret")

    r = await upload(run_client, bob, adas_chat, "b.txt", b"bob's text")
    assert_error(r, 404, "chat_not_found")
    r = await run_client.get(f"/api/chats/{adas_chat}/attachments", headers=bob)
    assert_error(r, 404, "chat_not_found")
    r = await run_client.delete(f"/api/attachments/{adas_file['id']}", headers=bob)
    assert_error(r, 404, "attachment_not_found")
    assert_error(await run_client.delete("/api/attachments/nonsense", headers=bob), 404)

    bobs_chat = await new_chat(run_client, bob)
    for chat_id, auth in ((bobs_chat, bob), (await new_chat(run_client, ada), ada)):
        r = await run_client.post(
            f"/api/chats/{chat_id}/messages",
            json={"content": "what is in it?", "attachment_ids": [adas_file["id"]]},
            headers={**auth, "Accept": "application/json"},
        )
        assert_error(r, 404, "attachment_not_found")  # not theirs, or not this chat's
        async with run_services.db.transaction() as s:
            count = await s.scalar(select(func.count()).where(Message.chat_id == chat_id))
        assert count == 0  # nothing made
    listed = (await run_client.get(f"/api/chats/{adas_chat}/attachments", headers=ada)).json()
    assert [(a["id"], a["message_id"]) for a in listed["data"]] == [(adas_file["id"], None)]


async def test_a_file_is_removed_before_sending_not_after(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    user_id = await me(run_client, auth)
    chat_id = await new_chat(run_client, auth)
    kept = await uploaded(run_client, auth, chat_id, "kept.txt", b"the kept file")
    dropped = await uploaded(run_client, auth, chat_id, "dropped.txt", b"the dropped file")
    third = await uploaded(run_client, auth, chat_id, "third.txt", b"a third")
    r = await upload(run_client, auth, chat_id, "fourth.txt", b"one too many")
    assert_error(r, 409, "too_many_files")  # attachments.max_files waiting at once

    r = await run_client.delete(f"/api/attachments/{dropped['id']}", headers=auth)
    assert r.status_code == 200 and r.json()["deleted"] is True
    r = await run_client.delete(f"/api/attachments/{third['id']}", headers=auth)
    assert r.status_code == 200
    assert (await stored(run_services, user_id))[0] == 1
    assert len((await stored(run_services, user_id))[1]) == 1

    said, _ = await answer(run_client, auth, chat_id, "/echo read it", [kept["id"]])
    assert "the kept file" in said and "dropped" not in said
    r = await run_client.delete(f"/api/attachments/{kept['id']}", headers=auth)
    assert_error(r, 409, "attachment_sent")
    for ids, code in (([kept["id"]], 409), ([dropped["id"]], 404)):
        r = await run_client.post(
            f"/api/chats/{chat_id}/messages",
            json={"content": "again", "attachment_ids": ids},
            headers={**auth, "Accept": "application/json"},
        )
        assert_error(r, code)

    r = await run_client.delete(f"/api/chats/{chat_id}", headers=auth)
    assert r.status_code == 200
    assert await stored(run_services, user_id) == (0, [])  # the chat's files went with it


def _section(i: int) -> str:
    filler = " ".join(f"filler{i}w{j}" for j in range(90))
    fact = " The zebra password is tangerine." if i == 27 else ""
    return f"Section {i}. {filler}.{fact}\n"


async def test_a_big_file_enters_as_the_chunks_that_bear_on_the_question(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    text = "".join(_section(i) for i in range(40)).encode()  # ~3,700 words: over any room
    big = await uploaded(run_client, auth, chat_id, "manual.txt", text)
    small = await uploaded(run_client, auth, chat_id, "small.txt", b"A small note.")

    said, _ = await answer(
        run_client, auth, chat_id, "/echo what is the zebra password?", [big["id"], small["id"]]
    )
    assert "File: small.txt\nA small note." in said  # fits its share: whole
    assert "File: manual.txt (the parts that bear on the message" in said
    assert "The zebra password is tangerine." in said
    shown = said.count("Section ")
    assert 0 < shown < 40, shown


async def test_a_follow_up_question_still_sees_the_files_sent_before_it(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    notes = await uploaded(run_client, auth, chat_id, "notes.md", b"# Plan\nShip on Friday.\n")
    await answer(run_client, auth, chat_id, "/echo read this", [notes["id"]])

    said, sent = await answer(run_client, auth, chat_id, "/echo and when do we ship?", [])

    assert "File: notes.md" in said and "Ship on Friday." in said, said
    question = await stored_message(run_client, auth, chat_id, sent["user_message_id"])
    assert question["attachments"] == []  # still the earlier message's file, not this one's


async def test_an_upload_while_the_blob_store_is_down_is_a_503_and_leaves_nothing(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parley.blobs.interface import BlobStoreError

    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)

    async def down(key: str, data: bytes) -> None:
        raise BlobStoreError(f"cannot write {key}: connection refused")

    monkeypatch.setattr(run_services.archiver.blobs, "put", down)
    r = await upload(run_client, auth, chat_id, "notes.md", b"# Plan\n")

    assert_error(r, 503, "blob_store_unavailable")
    assert await stored(run_services, await me(run_client, auth)) == (0, [])
