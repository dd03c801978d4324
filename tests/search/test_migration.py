"""Migration 0011 both ways: titles made while it was down are indexed when it comes back."""

from __future__ import annotations

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from parley.store import chats, users
from parley.store.chat_search import Hit, search_chats
from parley.store.database import Database
from parley.store.migrate import current_revision, upgrade
from parley.store.pages import Cursors
from tests.store.test_search import downgrade


def title_objects(conn: Connection) -> set[str]:
    names = set(inspect(conn).get_table_names()) & {"chats_fts"}
    names |= {c["name"] for c in inspect(conn).get_columns("chats")} & {"title_tsv"}
    if conn.dialect.name == "sqlite":
        triggers = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        names |= {row[0] for row in triggers if row[0].startswith("chats_fts")}
    return names


async def objects(db: Database) -> set[str]:
    async with db.engine.connect() as conn:
        return await conn.run_sync(title_objects)


async def hits(db: Database, user_id: str, query: str) -> list[Hit]:
    """The first page (20) of what search across chats finds for the user, best first."""
    async with db.transaction() as s:
        page = await search_chats(
            s, user_id=user_id, query=query, limit=20, cursor=None, cursors=Cursors("k")
        )
    return page.items


async def titles_found(db: Database, user_id: str, query: str) -> list[str]:
    return sorted(hit.chat_title for hit in await hits(db, user_id, query))


async def test_the_migration_goes_down_and_up_again(db: Database) -> None:
    async with db.transaction() as s:
        user = (
            await users.create_user(s, email="a@example.com", password_hash="x", tier="free")
        ).id
        await chats.create_chat(s, user_id=user, title="Heron watching")
    made = await objects(db)
    assert made
    try:
        await downgrade(db, "0010")
        assert await current_revision(db) == "0010"
        assert await objects(db) == set()
        async with db.engine.begin() as conn:  # as 0010's code would write it
            await conn.execute(
                text(
                    "INSERT INTO chats (id, user_id, title, message_count, created_at,"
                    " updated_at, last_activity_at, summary_through_seq) SELECT"
                    " 'chat_' || :n, user_id, 'More herons', 0, created_at, updated_at,"
                    " last_activity_at, 0 FROM chats"
                ),
                {"n": "0" * 32},
            )
    finally:
        await upgrade(db)
    assert await objects(db) == made
    assert await titles_found(db, user, "heron") == ["Heron watching", "More herons"]
