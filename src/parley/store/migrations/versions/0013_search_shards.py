"""messages: SQLite's message index in 16 tables by user, so ranking a word costs its shard's rows

Migration 0012 made a user's search read only where the user's posting list and the words'
meet. What it left: FTS5's ``bm25`` weighs each word by its inverse document frequency, and
counts that frequency by reading the word's whole posting list, in every user's rows, at
every query (``xQueryPhrase``; no setting skips it, and an auxiliary function of our own
would need FTS5's C API, which Python's ``sqlite3`` does not reach). With 10 million
messages a common word's list held 1.09 million rows: 31 to 44 ms of a query that otherwise
took 5 (``bench/search.py``, 2026-11-26).

SQLite: ``messages_fts`` becomes ``messages_fts_0`` … ``messages_fts_15``, the same FTS5
tables (external content over ``messages``: ``content`` and ``user_id``), each holding the
messages of the users whose id's last character puts them there: its place in
``0123456789abcdef``, plus one, modulo 16 (ids end in random hex: ``domain.new_id``; any
other character lands in 0). ``store.search.fts_table`` is the same rule in Python. A
word's frequency is then counted in one shard, a sixteenth of the table; bm25's weights
become the shard's (the users sharing it), still a fair measure of how common a word is.
Triggers keep the shards as the one table's were kept, one set per shard. The shards are
filled from ``messages`` (one pass per shard); ``messages`` itself is not touched.

Postgres: nothing (``ts_rank`` has no document frequency to count).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 14:00:00
"""

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARDS = 16
_COLUMNS = "content, user_id"


def shard_of(user_id: str) -> str:
    """The SQL of the shard of a ``user_id`` expression (``store.search.shard_of``)."""
    return f"(instr('0123456789abcdef', substr({user_id}, -1)) % {SHARDS})"


def _values(row: str) -> str:
    return f"{row}.rowid, {row}.content, {row}.user_id"


def _shard(k: int) -> tuple[str, ...]:
    """Shard ``k``: its table, its three triggers, and its rows."""
    fts = f"messages_fts_{k}"
    return (
        f"CREATE VIRTUAL TABLE {fts} USING fts5({_COLUMNS}, content='messages', "
        "content_rowid='rowid', tokenize='porter unicode61')",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON messages"  # noqa: S608 (names)
        f" WHEN {shard_of('new.user_id')} = {k} BEGIN"
        f" INSERT INTO {fts}(rowid, {_COLUMNS}) VALUES ({_values('new')}); END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON messages"  # noqa: S608 (names)
        f" WHEN {shard_of('old.user_id')} = {k} BEGIN"
        f" INSERT INTO {fts}({fts}, rowid, {_COLUMNS}) VALUES ('delete', {_values('old')}); END",
        f"CREATE TRIGGER {fts}_update AFTER UPDATE OF content, user_id ON messages"
        f" WHEN {shard_of('old.user_id')} = {k} OR {shard_of('new.user_id')} = {k} BEGIN"
        f" INSERT INTO {fts}({fts}, rowid, {_COLUMNS}) SELECT 'delete', {_values('old')}"
        f" WHERE {shard_of('old.user_id')} = {k};"
        f" INSERT INTO {fts}(rowid, {_COLUMNS}) SELECT {_values('new')}"
        f" WHERE {shard_of('new.user_id')} = {k}; END",
        f"INSERT INTO {fts}(rowid, {_COLUMNS}) SELECT rowid, {_COLUMNS} FROM messages"  # noqa: S608 (names)
        f" WHERE {shard_of('user_id')} = {k}",
    )


def _drop_shard(k: int) -> tuple[str, ...]:
    fts = f"messages_fts_{k}"
    triggers = (f"DROP TRIGGER IF EXISTS {fts}_{op}" for op in ("update", "delete", "insert"))
    return (*triggers, f"DROP TABLE IF EXISTS {fts}")


def _one_table(columns: tuple[str, ...]) -> tuple[str, ...]:
    """Migration 0012's ``messages_fts`` and its triggers (0012 drops what is there first)."""
    before = importlib.import_module("parley.store.migrations.versions.0012_search_by_user")
    statements: tuple[str, ...] = before._sqlite_fts(columns)
    return statements


def upgrade() -> None:
    if not _is_sqlite():
        return
    drop = [s for s in _one_table(("content", "user_id")) if s.startswith("DROP")]
    for statement in (*drop, *(s for k in range(SHARDS) for s in _shard(k))):
        op.execute(statement)


def downgrade() -> None:
    if not _is_sqlite():
        return
    shards = (s for k in range(SHARDS) for s in _drop_shard(k))
    for statement in (*shards, *_one_table(("content", "user_id"))):
        op.execute(statement)


def _is_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"
