"""Export and import at the store (``store/exports.py``, ``store/imports.py``), on SQLite and
Postgres: a user's chats exported, written as JSON, read back and imported for another user
give the same chats (titles, times, messages in order with their roles, contents, statuses,
models and times); ChatGPT's export imported; the export reads chat by chat, oldest first,
the user's chats only; imported ids are always new."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from parley.domain import MessageRole, MessageStatus, RunSource, RunStatus, new_id
from parley.engines.fake import FAKE_MODEL
from parley.engines.sampling import SamplingParams
from parley.portability.document import (
    ChatDocument,
    ExportDocument,
    chat_document,
    export_document,
    export_json,
)
from parley.portability.reader import read_import
from parley.store import chats, run_ends, users
from parley.store.database import Database
from parley.store.exports import export_rows
from parley.store.imports import import_chats
from parley.store.new_runs import NewRun, create_run
from parley.store.schema import Chat, Message, Run
from tests.portability.test_chatgpt import FIXTURE

T0 = datetime(2025, 6, 7, 8, 9, 10, 123456, tzinfo=UTC)
USER, ASSISTANT = MessageRole.USER, MessageRole.ASSISTANT
DONE = MessageStatus.COMPLETED


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def a_user(db: Database, email: str) -> str:
    async with db.transaction() as s:
        return (await users.create_user(s, email=email, password_hash="x", tier="free")).id


async def a_chat(
    db: Database, user_id: str, title: str, at: datetime, *said: tuple[MessageRole, str]
) -> str:
    """A chat made at ``at`` with the messages said a minute apart after it."""
    chat_id = new_id("chat")
    async with db.transaction() as s:
        s.add(
            Chat(
                id=chat_id,
                user_id=user_id,
                title=title,
                message_count=0,
                created_at=at,
                updated_at=at,
                last_activity_at=at,
            )
        )
        for minutes, (role, content) in enumerate(said, start=1):
            when = at + timedelta(minutes=minutes)
            message = Message(
                id=chats.new_message_id(),
                user_id=user_id,
                chat_id=chat_id,
                role=role,
                content=content,
                status=DONE,
                model=FAKE_MODEL if role is ASSISTANT else None,
                created_at=when,
                updated_at=when,
            )
            await chats.add_message(s, message)
    return chat_id


async def a_run(db: Database, user_id: str, chat_id: str, content: str, answer: str) -> str:
    """A chat's run, finished: its user message, its answer and its run row."""
    new = NewRun(
        user_id=user_id,
        chat_id=chat_id,
        content=content,
        model=FAKE_MODEL,
        tier="free",
        priority=0,
        max_tokens=16,
        sampling=SamplingParams(temperature=0.5),
        idempotency_key=None,
        request_hash=None,
    )
    async with db.transaction() as s:
        run = await create_run(s, new)
    outcome = run_ends.Outcome(
        status=RunStatus.COMPLETED, content=answer, prompt_tokens=5, completion_tokens=7
    )
    async with db.transaction() as s:
        await run_ends.finish(s, run_id=run.id, outcome=outcome, from_status=RunStatus.QUEUED)
    return run.id


async def exported(db: Database, user_id: str, *, page: int = 100) -> ExportDocument:
    async with db.transaction() as s:
        docs = [
            chat_document(chat, messages, runs, archived=False)
            async for chat, messages, runs in export_rows(s, user_id=user_id, page=page)
        ]
        user = await users.get_user(s, user_id)
    assert user is not None
    return export_document(user, docs, exported_at=datetime.now(UTC))


async def exported_json(db: Database, user_id: str) -> bytes:
    """The export as the export job writes it: chat by chat, one chat a query."""
    async with db.transaction() as s:
        user = await users.get_user(s, user_id)
        assert user is not None

        async def documents() -> AsyncIterator[ChatDocument]:
            async for chat, messages, runs in export_rows(s, user_id=user_id, page=1):
                yield chat_document(chat, messages, runs, archived=False)

        pieces = [p async for p in export_json(user, documents(), exported_at=T0)]
    return b"".join(pieces)


def same_chat(doc: ChatDocument) -> dict[str, Any]:
    """What a round trip keeps of a chat: all but ids and runs."""
    return {
        "title": doc.title,
        "times": (doc.created_at, doc.updated_at, doc.last_activity_at),
        "messages": [
            (m.seq, m.role, m.content, m.status, m.model, m.created_at) for m in doc.messages
        ],
    }


async def test_export_then_import_for_another_user_gives_the_same_chats(db: Database) -> None:
    ada, bob = await a_user(db, "ada@example.com"), await a_user(db, "bob@example.com")
    await a_chat(db, ada, "Tides", T0, (USER, "Why tides?"), (ASSISTANT, "The **Moon**.\n\n-"))
    later = await a_chat(db, ada, "Empty, then a run", T0 + timedelta(days=1))
    run_id = await a_run(db, ada, later, "Say hi", "Hi!")
    await a_chat(db, bob, "Bob's own", T0 - timedelta(days=1), (USER, "mine"))
    original = await exported(db, ada)
    assert [c.title for c in original.chats] == ["Tides", "Empty, then a run"]
    assert [r.id for r in original.chats[1].runs] == [run_id]
    assert original.chats[1].runs[0].completion_tokens == 7

    written = await exported_json(db, ada)
    assert ExportDocument.model_validate_json(written).chats == original.chats
    batch = read_import("parley-export.json", written)
    assert batch.source == "parley"
    async with db.transaction() as s:
        result = await import_chats(s, user_id=bob, batch=batch)
    assert (result.chats, result.messages) == (2, 4)

    again = await exported(db, bob)
    assert [c.title for c in again.chats] == ["Bob's own", "Tides", "Empty, then a run"]
    assert [same_chat(c) for c in again.chats[1:]] == [same_chat(c) for c in original.chats]
    assert [c.id for c in again.chats[1:]] == list(result.chat_ids)
    assert not {c.id for c in again.chats} & {c.id for c in original.chats}
    assert again.chats[2].runs == []  # messages only; the answer keeps its model
    assert again.chats[2].messages[1].model == FAKE_MODEL
    assert again.chats[2].messages[1].run_id is None
    assert (await exported(db, ada)).chats == original.chats  # ada's own untouched


async def test_chatgpt_s_export_imported(db: Database) -> None:
    ada = await a_user(db, "ada@example.com")
    batch = read_import("conversations.json", FIXTURE.read_bytes())
    async with db.transaction() as s:
        result = await import_chats(s, user_id=ada, batch=batch)
    assert (result.chats, result.messages) == (2, 9)
    doc = await exported(db, ada)
    lisbon, untitled = doc.chats
    assert lisbon.title == "Trip to Lisbon"
    assert [m.seq for m in lisbon.messages] == list(range(1, 8))
    assert lisbon.messages[3].content == "Cervejaria Ramiro, for seafood."
    assert lisbon.messages[3].model == "gpt-4o"
    assert {m.status for m in lisbon.messages} == {DONE}
    assert lisbon.created_at == datetime.fromtimestamp(1700000000.5, UTC)
    assert lisbon.last_activity_at == datetime.fromtimestamp(1700000090, UTC)
    assert untitled.runs == []
    async with db.transaction() as s:  # the user's list shows them by when they happened
        page = await s.scalars(
            select(Chat.title).where(Chat.user_id == ada).order_by(Chat.last_activity_at.desc())
        )
        assert list(page) == ["Imported chat", "Trip to Lisbon"]


async def test_an_imported_chat_goes_on(db: Database) -> None:
    """The next message after an import takes the next seq."""
    ada = await a_user(db, "ada@example.com")
    async with db.transaction() as s:
        result = await import_chats(
            s, user_id=ada, batch=read_import("c.json", FIXTURE.read_bytes())
        )
    await a_run(db, ada, result.chat_ids[1], "Again?", "Again.")
    doc = await exported(db, ada)
    assert [m.seq for m in doc.chats[1].messages] == [1, 2, 3, 4]
    assert [m.content for m in doc.chats[1].messages][2:] == ["Again?", "Again."]


async def test_the_same_import_twice_adds_nothing_the_second_time(db: Database) -> None:
    ada = await a_user(db, "ada@example.com")
    batch = read_import("c.json", FIXTURE.read_bytes())
    async with db.transaction() as s:
        first = await import_chats(s, user_id=ada, batch=batch)
    async with db.transaction() as s:
        second = await import_chats(s, user_id=ada, batch=batch)
    assert (second.chats, second.messages) == (0, 0)
    assert second.skipped_chat_ids == first.chat_ids
    assert len((await exported(db, ada)).chats) == 2
    bob = await a_user(db, "bob@example.com")  # another user's import is their own
    async with db.transaction() as s:
        assert (await import_chats(s, user_id=bob, batch=batch)).chats == 2


async def test_one_s_own_export_imported_back_adds_nothing(db: Database) -> None:
    ada = await a_user(db, "ada@example.com")
    made = await a_chat(db, ada, "Tides", T0, (USER, "hi"), (ASSISTANT, "hello"))
    batch = read_import("parley-export.json", await exported_json(db, ada))
    async with db.transaction() as s:
        result = await import_chats(s, user_id=ada, batch=batch)
    assert (result.chats, result.skipped_chat_ids) == (0, (made,))
    assert len((await exported(db, ada)).chats) == 1


async def test_export_reads_page_by_page_oldest_first_the_user_s_own(db: Database) -> None:
    ada, bob = await a_user(db, "ada@example.com"), await a_user(db, "bob@example.com")
    made = [await a_chat(db, ada, f"chat {i}", T0 + timedelta(hours=i % 3)) for i in range(5)]
    await a_chat(db, bob, "bob's", T0)
    doc = await exported(db, ada, page=2)
    by_time = sorted(zip(made, range(5), strict=True), key=lambda c: (c[1] % 3, c[0]))
    assert [c.id for c in doc.chats] == [chat_id for chat_id, _ in by_time]


async def test_summary_runs_are_not_exported(db: Database) -> None:
    ada = await a_user(db, "ada@example.com")
    chat_id = await a_chat(db, ada, "t", T0, (USER, "hello"))
    run_id = await a_run(db, ada, chat_id, "q", "a")
    async with db.transaction() as s:
        await s.execute(update(Run).where(Run.id == run_id).values(source=RunSource.SUMMARY))
    (chat,) = (await exported(db, ada)).chats
    assert chat.runs == []
    assert len(chat.messages) == 3
