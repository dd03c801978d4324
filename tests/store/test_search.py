"""Full-text search over a chat's older messages (``store/search.py``, migration 0008), on
SQLite (FTS5, kept current by triggers) and on Postgres (a generated tsvector): a fact is
found by a question about it, words match their other forms, results stay within the user's
chat and before the given seq, an answer is searchable once it ends, deleted messages are
gone, and no query text can raise or reach the query language."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from alembic import command
from sqlalchemy import delete, inspect, text, update
from sqlalchemy.engine import Connection

from parley.domain import MessageRole, MessageStatus, RunStatus, utcnow
from parley.engines.fake import FAKE_MODEL
from parley.engines.sampling import SamplingParams
from parley.store import chats, run_ends, users
from parley.store.database import Database
from parley.store.migrate import alembic_config, current_revision, upgrade
from parley.store.new_runs import NewRun, create_run
from parley.store.schema import Message
from parley.store.search import MAX_WORDS, query_words, search_messages

USER, ASSISTANT = MessageRole.USER, MessageRole.ASSISTANT
DONE = MessageStatus.COMPLETED
ALL = 2**31 - 1  # a before_seq past every message

Said = tuple[MessageRole, MessageStatus, str]


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def a_user(db: Database, email: str = "ada@example.com") -> str:
    async with db.transaction() as s:
        return (await users.create_user(s, email=email, password_hash="x", tier="free")).id


async def a_chat(db: Database, user_id: str) -> str:
    async with db.transaction() as s:
        return (await chats.create_chat(s, user_id=user_id, title="t")).id


async def say(db: Database, user_id: str, chat_id: str, *said: Said | str) -> list[Message]:
    """Append messages to the chat (a bare string: the user's), in order; with their seqs."""
    made: list[Message] = []
    async with db.transaction() as s:
        for item in said:
            role, status, content = (USER, DONE, item) if isinstance(item, str) else item
            now = utcnow()
            message = Message(
                id=chats.new_message_id(),
                user_id=user_id,
                chat_id=chat_id,
                role=role,
                status=status,
                content=content,
                created_at=now,
                updated_at=now,
            )
            made.append(await chats.add_message(s, message))
    return made


async def say_at_0007(db: Database, user_id: str, chat_id: str, content: str) -> None:
    """A user's message written as the code of revision 0007 wrote it (today's code knows
    columns that schema lacks)."""
    bump = (
        "UPDATE chats SET message_count = message_count + 1 WHERE id = :chat "
        "RETURNING message_count"
    )
    insert = (
        "INSERT INTO messages (id, user_id, chat_id, seq, role, content, status, created_at, "
        "updated_at) VALUES (:id, :user, :chat, :seq, 'user', :content, 'completed', "
        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
    )
    async with db.transaction() as s:
        seq = await s.scalar(text(bump), {"chat": chat_id})
        values = {"user": user_id, "chat": chat_id, "seq": seq, "content": content}
        await s.execute(text(insert), {"id": chats.new_message_id(), **values})


async def search(
    db: Database, user_id: str, chat_id: str, query: str, before_seq: int = ALL, limit: int = 10
) -> list[str]:
    """The contents of the messages found, best first."""
    async with db.transaction() as s:
        found = await search_messages(
            s, user_id=user_id, chat_id=chat_id, query=query, before_seq=before_seq, limit=limit
        )
    return [m.content for m in found]


FILLER = [
    "Let us talk about the weather today.",
    "It rained all morning in the valley.",
    "Tomorrow should be sunny, they say.",
]
CAT = "My cat is called Bartholomew."


async def test_a_fact_in_an_old_message_answers_a_question_about_it(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(
        db,
        user,
        chat,
        CAT,
        (ASSISTANT, DONE, "What a grand name for a cat!"),
        "I called my mother yesterday.",
        *FILLER,
    )
    found = await search(db, user, chat, "what is my cat called?")
    assert found[0] == CAT  # both words: ranked above the messages with one
    assert set(found) == {CAT, "What a grand name for a cat!", "I called my mother yesterday."}
    assert await search(db, user, chat, "Bartholomew") == [CAT]


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("I have two cats at home.", "what about the cat?"),
        (CAT, "tell me about cats"),
        ("She was running late.", "runs"),
        ("The connection was refused.", "connecting"),
    ],
)
async def test_words_match_their_other_forms(db: Database, stored: str, query: str) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, stored, *FILLER)
    assert await search(db, user, chat, query) == [stored]


async def test_only_messages_before_the_given_seq(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    made = await say(db, user, chat, *(f"parrot number {i}" for i in range(1, 6)))
    assert [m.seq for m in made] == [1, 2, 3, 4, 5]
    found = await search(db, user, chat, "parrot", before_seq=3)
    assert sorted(found) == ["parrot number 1", "parrot number 2"]
    assert await search(db, user, chat, "parrot", before_seq=1) == []
    assert len(await search(db, user, chat, "parrot", limit=2)) == 2


async def test_never_another_users_message_nor_another_chats(db: Database) -> None:
    ada, bob = await a_user(db, "ada@example.com"), await a_user(db, "bob@example.com")
    adas, adas_other, bobs = await a_chat(db, ada), await a_chat(db, ada), await a_chat(db, bob)
    await say(db, ada, adas, "Ada's cat is called Bartholomew.")
    await say(db, ada, adas_other, "Ada's other cat, also Bartholomew.")
    await say(db, bob, bobs, "Bob's cat is called Bartholomew too.")
    assert await search(db, ada, adas, "Bartholomew cat") == ["Ada's cat is called Bartholomew."]
    assert await search(db, bob, bobs, "Bartholomew") == ["Bob's cat is called Bartholomew too."]
    assert await search(db, bob, adas, "Bartholomew") == []  # Bob naming Ada's chat
    assert await search(db, ada, bobs, "Bartholomew") == []


async def test_only_messages_that_go_into_prompts(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(
        db,
        user,
        chat,
        (USER, MessageStatus.COMPLETED, "walrus question"),
        (ASSISTANT, MessageStatus.COMPLETED, "walrus answer"),
        (ASSISTANT, MessageStatus.CANCELLED, "walrus answer cut short"),
        (ASSISTANT, MessageStatus.FAILED, "walrus answer that failed"),
        (ASSISTANT, MessageStatus.REJECTED, "walrus answer rejected"),
        (ASSISTANT, MessageStatus.IN_PROGRESS, "walrus answer still streaming"),
    )
    found = await search(db, user, chat, "walrus")
    assert sorted(found) == ["walrus answer", "walrus answer cut short", "walrus question"]


def new_run(user_id: str, chat_id: str, content: str) -> NewRun:
    return NewRun(
        user_id=user_id,
        chat_id=chat_id,
        content=content,
        model=FAKE_MODEL,
        tier="free",
        priority=0,
        max_tokens=16,
        sampling=SamplingParams(),
        idempotency_key=None,
        request_hash=None,
    )


async def test_an_answer_is_searchable_once_it_ends(db: Database) -> None:
    """The answer is made empty and in progress, and its content UPDATEd when it ends."""
    user = await a_user(db)
    chat = await a_chat(db, user)
    async with db.transaction() as s:
        run = await create_run(s, new_run(user, chat, "Where is the spice island?"))
    assert await search(db, user, chat, "Zanzibar") == []
    answer = "Zanzibar, off the coast of Tanzania."
    outcome = run_ends.Outcome(
        status=RunStatus.COMPLETED, content=answer, prompt_tokens=5, completion_tokens=7
    )
    async with db.transaction() as s:
        finished = await run_ends.finish(
            s, run_id=run.id, outcome=outcome, from_status=RunStatus.QUEUED
        )
    assert finished is not None
    assert await search(db, user, chat, "zanzibar tanzania") == [answer]
    assert await search(db, user, chat, "spice islands") == ["Where is the spice island?"]
    async with db.transaction() as s:  # edited again: the old words are gone
        await s.execute(
            update(Message)
            .where(Message.id == run.assistant_message_id)
            .values(content="Somewhere else entirely.")
        )
    assert await search(db, user, chat, "zanzibar") == []
    assert await search(db, user, chat, "somewhere") == ["Somewhere else entirely."]


async def test_deleted_messages_and_chats_are_gone(db: Database) -> None:
    user = await a_user(db)
    chat, other = await a_chat(db, user), await a_chat(db, user)
    first, _ = await say(db, user, chat, "otter one", "otter two")
    await say(db, user, other, "otter three")
    async with db.transaction() as s:
        await s.execute(delete(Message).where(Message.id == first.id))
    assert await search(db, user, chat, "otter") == ["otter two"]
    async with db.transaction() as s:
        await chats.delete_chat(s, user_id=user, chat_id=chat)
    assert await search(db, user, chat, "otter") == []
    assert await search(db, user, other, "otter") == ["otter three"]
    await say(db, user, other, "otter four")  # the index is still sound after the deletes
    assert sorted(await search(db, user, other, "otter")) == ["otter four", "otter three"]


async def test_a_very_long_message_is_stored_and_found(db: Database) -> None:
    """A tsvector holds at most 1 MB: Postgres indexes a message's first 100,000 characters,
    so that a longer one is still stored (and found by its beginning)."""
    user = await a_user(db)
    chat = await a_chat(db, user)
    long = "kingfisher " + " ".join(f"w{i:07d}x" for i in range(150_000))  # 1.5 MB
    await say(db, user, chat, long, "a kingfisher again")
    assert sorted(await search(db, user, chat, "kingfisher"), key=len) == [
        "a kingfisher again",
        long,
    ]


HOSTILE = [
    '"',
    '"cat',
    'cat" OR "dog',
    "*",
    "cat*",
    "-cat",
    "NEAR(",
    "NEAR(cat dog)",
    "a:b",
    "content:cat",
    "cat AND",
    "^cat",
    "\x00",
    "cat\x00dog",
    "cat & | ! dog",
    "':* <-> (",
    "!!(",
    "\\",
    "é" * 5000,
    "💥 cat 💥",
    "cat " * 3000,
    " ".join(f"word{i}" for i in range(2000)),  # 10 kB and more
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
async def test_no_query_text_raises(db: Database, query: str) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, "a cat and a dog", *FILLER)
    found = await search(db, user, chat, query)
    assert found in ([], ["a cat and a dog"])
    if "cat" in query_words(query):
        assert found == ["a cat and a dog"]


@pytest.mark.parametrize("query", ["", "   ", "what is the", "a I of to", "?!", "x y z"])
async def test_a_query_of_no_words_finds_nothing(db: Database, query: str) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, "what is the x y z of it", *FILLER)
    assert query_words(query) == []
    assert await search(db, user, chat, query) == []


def test_query_words() -> None:
    assert query_words("What is my CAT called? cat, Cat!") == ["cat", "called"]
    assert query_words('a:b "x" NEAR(cats) snake_case') == ["near", "cats", "snake", "case"]
    assert query_words("ça coûte 42 €") == ["ça", "coûte", "42"]
    assert len(query_words(" ".join(f"w{i}" for i in range(100)))) == MAX_WORDS


# -- the migration, both ways ---------------------------------------------------------------


async def downgrade(db: Database, revision: str) -> None:
    def run(conn: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(run)


def search_objects(conn: Connection) -> set[str]:
    """What migration 0008 made that is there now."""
    found = inspect(conn).get_table_names()
    names = {t for t in found if t.startswith("message")} - {"messages"}
    names |= {c["name"] for c in inspect(conn).get_columns("messages")} & {"content_tsv"}
    if conn.dialect.name == "sqlite":
        triggers = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        names |= {row[0] for row in triggers}
    return names


async def objects(db: Database) -> set[str]:
    async with db.engine.connect() as conn:
        return await conn.run_sync(search_objects)


async def test_the_migration_goes_down_and_up_again(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, "a heron before")
    made = await objects(db)
    assert "message_embeddings" in made
    assert any(name.startswith("messages_fts") or name == "content_tsv" for name in made)
    try:
        await downgrade(db, "0007")
        assert await current_revision(db) == "0007"
        assert await objects(db) == set()
        await say_at_0007(db, user, chat, "a heron while it was down")
    finally:
        await upgrade(db)
    assert await objects(db) == made
    found = await search(db, user, chat, "herons")  # rows from before the upgrade indexed too
    assert sorted(found) == ["a heron before", "a heron while it was down"]
    await say(db, user, chat, "a heron after")
    assert len(await search(db, user, chat, "heron")) == 3
