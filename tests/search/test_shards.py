"""Migration 0013: SQLite's message index in 16 tables by user (``store.search.fts_table``).

Every user's messages are found by both searches whatever their id ends in, and on SQLite
they sit in the one shard that ``shard_of`` names (the triggers' rule in SQL and the rule in
Python agree), through insert, edit and delete; the migration goes down to one table and
up again with what was written meanwhile."""

from __future__ import annotations

from sqlalchemy import text, update

from parley.domain import utcnow
from parley.store.database import Database
from parley.store.migrate import current_revision, upgrade
from parley.store.schema import Message, User
from parley.store.search import FTS_SHARDS, fts_table, shard_of, user_token
from tests.search.test_user_index import found, shape
from tests.store.test_search import a_chat, downgrade, say, say_at_0007, search

ENDINGS = "0123456789abcdef"


async def a_user_ending(db: Database, last: str) -> str:
    """A user whose id ends in ``last`` (ids are random hex: one of each is wanted here)."""
    user_id = "user_" + "5a" * 11 + "0" + last
    async with db.transaction() as s:
        now = utcnow()
        s.add(User(id=user_id, email=f"{last}@example.com", password_hash="x", tier="free",
                   created_at=now, updated_at=now))  # fmt: skip
    return user_id


async def shards_holding(db: Database, user_id: str) -> list[int]:
    """SQLite: the shards whose index has rows of the user's."""
    match = f'user_id : "{user_token(user_id)}"'
    held = []
    async with db.engine.connect() as conn:
        for k in range(FTS_SHARDS):
            sql = f"SELECT count(*) FROM messages_fts_{k} WHERE messages_fts_{k} MATCH :m"  # noqa: S608
            if (await conn.execute(text(sql), {"m": match})).scalar_one():
                held.append(k)
    return held


def test_every_ending_has_a_shard_and_the_spread_is_even() -> None:
    shards = [shard_of("user_" + "0" * 23 + c) for c in ENDINGS]
    assert sorted(shards) == list(range(FTS_SHARDS))
    assert shard_of("legacy_idz") == 0  # not hex: the first shard
    assert fts_table("user_00f") == "messages_fts_0"
    assert fts_table("user_001") == "messages_fts_2"


async def test_each_users_messages_are_found_and_kept_in_their_shard(
    db: Database, database_url: str
) -> None:
    users = {c: await a_user_ending(db, c) for c in ENDINGS + "z"}  # z: not hex
    said = {}
    for c, user in users.items():
        chat = await a_chat(db, user)
        said[c] = (chat, (await say(db, user, chat, f"heron tag{c}x", "otter"))[0])
    for c, user in users.items():
        assert await found(db, user, "herons") == [f"heron tag{c}x"]
        assert await search(db, user, said[c][0], "heron") == [f"heron tag{c}x"]
    if database_url.startswith("sqlite"):
        for user in users.values():
            assert await shards_holding(db, user) == [shard_of(user)]
    edited, deleted = users["7"], users["c"]
    async with db.transaction() as s:
        await s.execute(
            update(Message).where(Message.id == said["7"][1].id).values(content="egret now")
        )
        await s.execute(text("DELETE FROM messages WHERE user_id = :u"), {"u": deleted})
    assert await found(db, edited, "heron") == []
    assert await found(db, edited, "egret") == ["egret now"]
    assert await found(db, deleted, "heron") == []
    assert await found(db, users["8"], "heron") == ["heron tag8x"]
    if database_url.startswith("sqlite"):
        assert await shards_holding(db, edited) == [shard_of(edited)]
        assert await shards_holding(db, deleted) == []


async def test_the_migration_goes_down_to_one_table_and_up_again(
    db: Database, database_url: str
) -> None:
    """SQLite: one ``messages_fts`` at 0012, the shards again at head, with what was said
    while it was down; Postgres: nothing changes either way."""
    sqlite = database_url.startswith("sqlite")
    ada, bob = await a_user_ending(db, "3"), await a_user_ending(db, "e")
    ada_chat, bob_chat = await a_chat(db, ada), await a_chat(db, bob)
    await say(db, ada, ada_chat, "heron seen early")
    await say(db, bob, bob_chat, "bob heron")
    at_head = await shape(db)
    try:
        await downgrade(db, "0012")
        assert await current_revision(db) == "0012"
        assert await shape(db) == at_head
        assert await shard_tables(db) == (0 if sqlite else None)
        await say_at_0007(db, ada, ada_chat, "heron seen midway")
    finally:
        await upgrade(db)
    assert await shard_tables(db) == (FTS_SHARDS if sqlite else None)
    if sqlite:
        assert await shards_holding(db, ada) == [shard_of(ada)]
    assert sorted(await found(db, ada, "heron")) == ["heron seen early", "heron seen midway"]
    assert await found(db, bob, "heron") == ["bob heron"]
    await say(db, ada, ada_chat, "heron seen late")
    assert len(await found(db, ada, "heron")) == 3


async def shard_tables(db: Database) -> int | None:
    """SQLite: how many ``messages_fts_<n>`` tables there are; Postgres: None."""
    async with db.engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            return None
        names = await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
        return sum(1 for (n,) in names if n.removeprefix("messages_fts_").isdigit())
