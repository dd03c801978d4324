"""Archive (issue 20): idle chats move to the blob store, read as before, come back when
written to; a failure at any step loses nothing. Every test runs on both stacks and both
blob stores (tests/archive/conftest.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from parley.archive.archiver import chat_key
from parley.blobs.interface import BlobNotFound
from parley.services import Services
from parley.store import archives
from parley.store.schema import Chat, Message, Run
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, send_json, wait_run

YEAR = timedelta(days=400)


async def _chat_with_answers(
    client: httpx.AsyncClient, auth: dict[str, str], turns: int = 2
) -> str:
    chat_id = await new_chat(client, auth)
    for i in range(turns):
        sent = await send_json(client, auth, chat_id, f"question {i}")
        await wait_run(client, auth, sent["run_id"])
    return chat_id


async def _age(services: Services, chat_id: str, by: timedelta = YEAR) -> None:
    async with services.db.transaction() as s:
        chat = await s.get(Chat, chat_id)
        assert chat is not None
        await s.execute(
            update(Chat)
            .where(Chat.id == chat_id)
            .values(last_activity_at=chat.last_activity_at - by)
        )


async def _history(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, **params: Any
) -> Any:
    r = await client.get(f"/api/chats/{chat_id}/messages", params=params, headers=auth)
    assert r.status_code == 200, r.text
    return r.json()


async def _rows(services: Services, chat_id: str) -> tuple[int, int]:
    async with services.db.transaction() as s:
        messages = await s.scalar(select(func.count()).where(Message.chat_id == chat_id))
        runs = await s.scalar(select(func.count()).where(Run.chat_id == chat_id))
    return messages or 0, runs or 0


async def _chat(services: Services, chat_id: str) -> Chat:
    async with services.db.transaction() as s:
        chat = await s.get(Chat, chat_id)
    assert chat is not None
    return chat


async def test_an_idle_chat_moves_out_and_reads_as_before(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=3)
    fresh = await _chat_with_answers(run_client, auth, turns=1)
    before = await _history(run_client, auth, chat_id, limit=100)
    before_asc = await _history(run_client, auth, chat_id, limit=100, order="asc")
    await _age(run_services, chat_id)

    report = await run_services.archiver.archive_due()

    assert (report.archived, report.failed) == (1, 0)  # the fresh chat stays
    assert await _rows(run_services, chat_id) == (0, 0)
    assert await _rows(run_services, fresh) != (0, 0)
    chat = await _chat(run_services, chat_id)
    assert chat.archive_key == chat_key(chat.user_id, chat_id) and chat.archive_bytes
    stored = await run_services.archiver.blobs.get(chat.archive_key)
    assert len(stored) == chat.archive_bytes
    run_services.archiver._cache.clear()  # read from the store, not the cache
    assert await _history(run_client, auth, chat_id, limit=100) == before
    assert await _history(run_client, auth, chat_id, limit=100, order="asc") == before_asc
    detail = (await run_client.get(f"/api/chats/{chat_id}", headers=auth)).json()
    assert detail["archived_at"] is not None and detail["message_count"] == 6
    listed = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert [c["id"] for c in listed] == [fresh, chat_id]


async def test_history_of_an_archived_chat_pages_by_the_same_cursors(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=3)
    first = await _history(run_client, auth, chat_id, limit=4)
    await _age(run_services, chat_id)
    assert (await run_services.archiver.archive_due()).archived == 1

    archived_first = await _history(run_client, auth, chat_id, limit=4)
    assert archived_first == first  # the same page and the same cursor
    rest = await _history(run_client, auth, chat_id, limit=4, cursor=first["next_cursor"])
    assert len(rest["data"]) == 2 and rest["data"][-1]["content"] == "question 0"
    assert rest["next_cursor"] is None
    seqs = [m["id"] for m in first["data"] + rest["data"]]
    assert len(set(seqs)) == 6


async def test_a_message_to_an_archived_chat_brings_it_back_first(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=2)
    before = await _history(run_client, auth, chat_id, limit=100, order="asc")
    await _age(run_services, chat_id)
    await run_services.archiver.archive_due()
    key = (await _chat(run_services, chat_id)).archive_key
    assert key is not None

    sent = await send_json(run_client, auth, chat_id, "and now?")
    run = await wait_run(run_client, auth, sent["run_id"])

    assert run["status"] == "completed"
    after = await _history(run_client, auth, chat_id, limit=100, order="asc")
    assert after["data"][:4] == before["data"]
    assert [m["content"] for m in after["data"][4:5]] == ["and now?"]
    assert len(after["data"]) == 6
    chat = await _chat(run_services, chat_id)
    assert chat.archived_at is None and chat.archive_key is None
    assert await _rows(run_services, chat_id) == (6, 3)
    with pytest.raises(BlobNotFound):
        await run_services.archiver.blobs.get(key)
    # the old runs came back too: their records read as before
    first_run = before["data"][1]["run_id"]
    assert (await run_client.get(f"/api/runs/{first_run}", headers=auth)).status_code == 200


async def test_a_restored_chat_is_not_archived_again_before_its_write(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """A restore is for a write: it counts as activity, so the next pass leaves the chat
    (else a pass between the restore and the write archives it again: 409 chat_archived)."""
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    await _age(run_services, chat_id)
    assert (await run_services.archiver.archive_due()).archived == 1
    assert await run_services.archiver.restore(await _chat(run_services, chat_id))
    assert (await run_services.archiver.archive_due()).archived == 0
    sent = await send_json(run_client, auth, chat_id, "still here?")
    assert (await wait_run(run_client, auth, sent["run_id"]))["status"] == "completed"


async def test_another_users_archived_chat_is_not_found(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    chat_id = await _chat_with_answers(run_client, ada, turns=1)
    await _age(run_services, chat_id)
    await run_services.archiver.archive_due()

    for r in (
        await run_client.get(f"/api/chats/{chat_id}", headers=bob),
        await run_client.get(f"/api/chats/{chat_id}/messages", headers=bob),
        await run_client.post(
            f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers=bob
        ),
        await run_client.delete(f"/api/chats/{chat_id}", headers=bob),
    ):
        assert_error(r, 404, "chat_not_found")
    assert (await _chat(run_services, chat_id)).archived_at is not None  # still archived


@pytest.mark.parametrize("step", ["write", "verify", "mark"])
async def test_a_crash_at_any_step_loses_nothing(
    run_client: httpx.AsyncClient,
    run_services: Services,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=2)
    before = await _history(run_client, auth, chat_id, limit=100)
    await _age(run_services, chat_id)
    mover = run_services.archiver

    async def crash(*_: Any, **__: Any) -> None:
        raise _Crash(step)

    if step == "mark":
        monkeypatch.setattr(archives, "mark_archived", crash)
    else:
        monkeypatch.setattr(mover, step, crash)
    with pytest.raises(_Crash):
        await mover.archive_due()

    assert await _rows(run_services, chat_id) == (4, 2)  # whole, in the database
    assert (await _chat(run_services, chat_id)).archived_at is None
    assert await _history(run_client, auth, chat_id, limit=100) == before
    monkeypatch.undo()
    assert (await mover.archive_due()).archived == 1  # the next pass moves it
    mover._cache.clear()
    assert await _history(run_client, auth, chat_id, limit=100) == before


class _Crash(Exception):
    pass


async def test_an_object_that_reads_back_wrong_is_never_trusted(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    await _age(run_services, chat_id)
    blobs = run_services.archiver.blobs
    real_put = blobs.put

    async def torn_put(key: str, data: bytes) -> None:
        await real_put(key, data[: len(data) // 2])

    monkeypatch.setattr(blobs, "put", torn_put)
    report = await run_services.archiver.archive_due()

    assert (report.archived, report.failed) == (0, 1)
    assert await _rows(run_services, chat_id) == (2, 1)
    assert (await _chat(run_services, chat_id)).archived_at is None


async def test_a_chat_that_moves_on_meanwhile_stays(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message between reading the rows and the move: the move is dropped."""
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    await _age(run_services, chat_id)
    mover = run_services.archiver
    real_verify = mover.verify

    async def verify_then_talk(key: str, data: bytes) -> None:
        await real_verify(key, data)
        sent = await send_json(run_client, auth, chat_id, "still here")
        await wait_run(run_client, auth, sent["run_id"])

    monkeypatch.setattr(mover, "verify", verify_then_talk)
    report = await mover.archive_due()

    assert (report.archived, report.skipped) == (0, 1)
    assert await _rows(run_services, chat_id) == (4, 2)


async def test_deleting_an_archived_chat_deletes_its_object(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    await _age(run_services, chat_id)
    await run_services.archiver.archive_due()
    key = (await _chat(run_services, chat_id)).archive_key
    assert key is not None

    r = await run_client.delete(f"/api/chats/{chat_id}", headers=auth)

    assert r.status_code == 200
    with pytest.raises(BlobNotFound):
        await run_services.archiver.blobs.get(key)
    assert_error(await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth), 404)


async def test_an_unreadable_archive_is_a_clear_503_and_loses_nothing(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    await _age(run_services, chat_id)
    await run_services.archiver.archive_due()
    chat = await _chat(run_services, chat_id)
    assert chat.archive_key is not None
    data = await run_services.archiver.blobs.get(chat.archive_key)
    await run_services.archiver.blobs.put(chat.archive_key, b"not gzip")
    run_services.archiver._cache.clear()

    error = assert_error(
        await run_client.get(f"/api/chats/{chat_id}/messages", headers=auth),
        503,
        "archive_unavailable",
    )
    assert "archived" in error["message"]
    await run_services.archiver.blobs.put(chat.archive_key, data)
    assert len((await _history(run_client, auth, chat_id))["data"]) == 2


async def test_totals_count_archived_chats_and_bytes(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    old = [await _chat_with_answers(run_client, auth, turns=1) for _ in range(2)]
    await _chat_with_answers(run_client, auth, turns=1)
    for chat_id in old:
        await _age(run_services, chat_id)
    report = await run_services.archiver.archive_due()

    async with run_services.db.transaction() as s:
        totals = await archives.totals(s)
    assert totals.chats == 3 and totals.archived_chats == 2
    assert totals.archived_bytes == report.bytes > 0
    assert totals.messages == 2
