"""Export, import and account deletion through the HTTP API (issue 20), on both stacks and
both blob stores (a directory, a real S3 server: tests/archive/conftest.py's fixtures)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.archive.archiver import user_prefix
from parley.services import Services
from tests.archive.test_archive import _age, _chat_with_answers, _history
from tests.helpers import PASSWORD, assert_error, user_headers
from tests.waiting import eventually

CHATGPT = Path(__file__).parent / "chatgpt_conversations.json"


async def _ready_export(client: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, Any]:
    r = await client.post("/api/exports", headers=auth)
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "pending"
    export_id = r.json()["id"]

    async def ready() -> dict[str, Any] | None:
        body: dict[str, Any] = (await client.get(f"/api/exports/{export_id}", headers=auth)).json()
        assert body["status"] != "failed", body
        return body if body["status"] == "ready" else None

    return await eventually(ready, "the export to be ready", timeout=30)


async def _download(client: httpx.AsyncClient, url: str) -> zipfile.ZipFile:
    r = await client.get(url)  # no credentials: the link is the credential
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip"
    assert "attachment" in r.headers["content-disposition"]
    return zipfile.ZipFile(io.BytesIO(r.content))


async def test_an_export_holds_every_chat_archived_ones_too(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    old = await _chat_with_answers(run_client, auth, turns=2)
    new = await _chat_with_answers(run_client, auth, turns=1)
    old_history = await _history(run_client, auth, old, limit=100, order="asc")
    await _age(run_services, old)
    assert (await run_services.archiver.archive_due()).archived == 1

    export = await _ready_export(run_client, auth)
    zf = await _download(run_client, export["download_url"])

    assert (export["chats"], export["messages"]) == (2, 6)
    document = json.loads(zf.read("parley-export.json"))
    assert document["format"] == "parley.export" and document["user"]["email"] == "ada@example.com"
    by_id = {c["id"]: c for c in document["chats"]}
    assert by_id[old]["archived"] is True and by_id[new]["archived"] is False
    assert [m["content"] for m in by_id[old]["messages"]] == [
        m["content"] for m in old_history["data"]
    ]
    assert len(by_id[old]["runs"]) == 2 and all(
        r["status"] == "completed" for r in by_id[old]["runs"]
    )
    markdown = [n for n in zf.namelist() if n.startswith("markdown/")]
    assert len(markdown) == 2
    assert any("question 1" in zf.read(n).decode() for n in markdown)


async def test_export_links_are_the_owners_and_short_lived(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    await _chat_with_answers(run_client, ada, turns=1)
    export = await _ready_export(run_client, ada)
    export_id = export["id"]

    assert_error(await run_client.get(f"/api/exports/{export_id}", headers=bob), 404)
    assert (await run_client.get("/api/exports", headers=bob)).json()["data"] == []
    token = export["download_url"].split("token=")[1]
    for bad in (
        "",
        "x",
        "1.abc",
        f"{token}0",
        token.replace(token[-1], "0" if token[-1] != "0" else "1"),
        token.split(".")[0] + ".é",  # not ASCII: compare_digest would raise on a str
    ):
        r = await run_client.get(f"/api/exports/{export_id}/download", params={"token": bad})
        assert_error(r, 404, "export_link_invalid")
    other = await run_client.post("/api/exports", headers=bob)
    r = await run_client.get(f"/api/exports/{other.json()['id']}/download", params={"token": token})
    assert_error(r, 404, "export_link_invalid")  # a link is for its own export only
    stale, _ = run_services.exports.link_token(export_id, now=0)  # expired in 1970
    r = await run_client.get(f"/api/exports/{export_id}/download", params={"token": stale})
    assert_error(r, 404, "export_link_invalid")


async def test_export_then_import_gives_the_same_chats(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    first = await _chat_with_answers(run_client, ada, turns=2)
    await _chat_with_answers(run_client, ada, turns=1)
    await _age(run_services, first)
    await run_services.archiver.archive_due()
    export = await _ready_export(run_client, ada)
    data = (await run_client.get(export["download_url"])).content

    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.post(
        "/api/imports", params={"filename": "export.zip"}, content=data, headers=bob
    )

    assert r.status_code == 201, r.text
    assert (r.json()["source"], r.json()["chats"], r.json()["messages"]) == ("parley", 2, 6)
    assert await _chats_as_seen(run_client, bob) == await _chats_as_seen(run_client, ada)


async def _chats_as_seen(client: httpx.AsyncClient, auth: dict[str, str]) -> list[Any]:
    listed = (await client.get("/api/chats", params={"limit": 100}, headers=auth)).json()["data"]
    seen = []
    for chat in sorted(listed, key=lambda c: c["created_at"]):
        history = await _history(client, auth, chat["id"], limit=100, order="asc")
        messages = [(m["role"], m["content"], m["created_at"]) for m in history["data"]]
        seen.append((chat["title"], chat["created_at"], chat["message_count"], messages))
    return seen


async def test_a_chatgpt_export_imports_the_branch_that_was_shown(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    body = CHATGPT.read_bytes()
    r = await run_client.post(
        "/api/imports", params={"filename": "conversations.json"}, content=body, headers=auth
    )

    assert r.status_code == 201, r.text
    assert r.json()["source"] == "chatgpt"
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    lisbon = next(c for c in chats if c["title"] == "Trip to Lisbon")
    history = await _history(run_client, auth, lisbon["id"], limit=100, order="asc")
    contents = [m["content"] for m in history["data"]]
    assert "And where should I eat fish?" in contents  # the edited question, shown
    assert "Cervejaria Ramiro, for seafood." in contents  # the regenerated answer, shown
    assert history["data"][0]["created_at"].startswith("2023-11-14")  # its own times
    # the split form: conversations-000.json, -001.json in one zip
    conversations = json.loads(body)
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as zf:
        for i, conversation in enumerate(conversations):
            zf.writestr(f"export/conversations-{i:03}.json", json.dumps([conversation]))
    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.post("/api/imports", content=packed.getvalue(), headers=bob)
    assert r.status_code == 201 and r.json()["chats"] == len(_titles(chats)), r.text
    # ada's again: the same conversations, imported before, are skipped
    r = await run_client.post("/api/imports", content=packed.getvalue(), headers=auth)
    assert r.status_code == 201, r.text
    assert (r.json()["chats"], r.json()["skipped"]) == (0, len(chats))
    assert set(r.json()["skipped_chat_ids"]) == {c["id"] for c in chats}


def _titles(chats: list[dict[str, Any]]) -> list[str]:
    return [c["title"] for c in chats]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "unsupported_import"),
        (b"{not json", "invalid_import"),
        (b'{"format": "something else"}', "unsupported_import"),
        (b"PK\x03\x04 not really a zip", "invalid_import"),
    ],
)
async def test_a_bad_file_is_a_clear_422_and_imports_nothing(
    run_client: httpx.AsyncClient, body: bytes, code: str
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post("/api/imports", content=body, headers=auth)
    assert_error(r, 422, code)
    assert (await run_client.get("/api/chats", headers=auth)).json()["data"] == []


async def test_deleting_an_account_deletes_its_objects_and_nothing_of_others(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    ada_id = (await run_client.get("/api/me", headers=ada)).json()["user"]["id"]
    bob_id = (await run_client.get("/api/me", headers=bob)).json()["user"]["id"]
    for auth in (ada, bob):
        chat_id = await _chat_with_answers(run_client, auth, turns=1)
        await _age(run_services, chat_id)
    await run_services.archiver.archive_due()
    await _ready_export(run_client, ada)
    blobs = run_services.archiver.blobs
    assert len(await blobs.list(user_prefix(ada_id))) == 2  # the archived chat, the export

    wrong = await run_client.request("DELETE", "/api/me", json={"password": "nope"}, headers=ada)
    assert_error(wrong, 422, "wrong_password")
    r = await run_client.request("DELETE", "/api/me", json={"password": PASSWORD}, headers=ada)

    assert r.status_code == 200, r.text
    assert await blobs.list(user_prefix(ada_id)) == []
    assert len(await blobs.list(user_prefix(bob_id))) == 1
    assert_error(await run_client.get("/api/me", headers=ada), 401)
    login = await run_client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert_error(login, 401)
    assert len((await run_client.get("/api/chats", headers=bob)).json()["data"]) == 1
