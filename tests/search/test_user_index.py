"""Migration 0012: the message index leads with the user (SQLite ``messages_fts.user_id``,
Postgres GIN on ``(user_id, content_tsv)``); both ways, and an id is never a word."""

from __future__ import annotations

from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from parley.store.database import Database
from parley.store.migrate import current_revision, upgrade
from parley.store.search import user_token
from tests.search.test_migration import hits
from tests.store.test_search import a_chat, a_user, downgrade, say, say_at_0007, search


def index_shape(conn: Connection) -> set[str]:
    """SQLite: the message index's columns (``messages_fts``, or its shards' since migration
    0013); Postgres: the GIN indexes on messages and chats."""
    if conn.dialect.name == "sqlite":
        tables = ("messages_fts", "messages_fts_0")
        pragmas = (conn.exec_driver_sql(f"PRAGMA table_info({t})") for t in tables)
        return {row[1] for rows in pragmas for row in rows}
    names = {i["name"] or "" for t in ("messages", "chats") for i in inspect(conn).get_indexes(t)}
    return {name for name in names if "tsv" in name}


async def shape(db: Database) -> set[str]:
    async with db.engine.connect() as conn:
        return await conn.run_sync(index_shape)


async def found(db: Database, user_id: str, query: str) -> list[str]:
    """What search across chats finds: the snippets of messages, best first."""
    return [hit.snippet for hit in await hits(db, user_id, query) if hit.message_id]


async def test_the_migration_goes_down_and_up_again(db: Database, database_url: str) -> None:
    ada, bob = await a_user(db), await a_user(db, "bob@example.com")
    ada_chat, bob_chat = await a_chat(db, ada), await a_chat(db, bob)
    await say(db, ada, ada_chat, "heron seen early")
    await say(db, bob, bob_chat, "bob heron")
    sqlite = database_url.startswith("sqlite")
    after = {"content", "user_id"} if sqlite else {"ix_messages_user_content_tsv",
                                                   "ix_chats_user_title_tsv"}  # fmt: skip
    before = {"content"} if sqlite else {"ix_messages_content_tsv", "ix_chats_title_tsv"}
    assert await shape(db) == after
    try:
        await downgrade(db, "0011")
        assert await current_revision(db) == "0011"
        assert await shape(db) == before
        await say_at_0007(db, ada, ada_chat, "heron seen midway")
    finally:
        await upgrade(db)
    assert await shape(db) == after
    assert sorted(await found(db, ada, "herons")) == ["heron seen early", "heron seen midway"]
    assert sorted(await search(db, ada, ada_chat, "herons")) == sorted(
        await found(db, ada, "heron")
    )
    await say(db, ada, ada_chat, "heron seen late")
    assert len(await found(db, ada, "heron")) == 3
    assert await found(db, bob, "heron") == ["bob heron"]


async def test_a_users_id_is_not_a_word_of_their_messages(db: Database) -> None:
    ada = await a_user(db)
    chat = await a_chat(db, ada)
    await say(db, ada, chat, "nothing about ids", "names " + user_token(ada))
    token = user_token(ada)
    assert await found(db, ada, token) == ["names " + token]
    assert await search(db, ada, chat, token) == ["names " + token]
