"""messages: the full-text indexes lead with the user, so a user's search reads only theirs

Search across chats (``store/chat_search.py``) and retrieval (``store/search.py``) always
ask for one user's messages. With 10 million messages in the table a common word matched a
million of them, every one read and then thrown away for belonging to someone else
(``bench/search.py``: p95 343 ms on SQLite, 862 ms on Postgres).

SQLite: ``messages_fts`` gains a second indexed column, ``user_id`` (external content: the
value is ``messages.user_id``). A query names the user's id as a token of that column AND
its words in ``content``: FTS5 intersects the two posting lists, skipping through the
longer one. Every query names its column (``content : ...``), so a word never matches an id.
The table and its triggers are made again and rebuilt from ``messages`` (one pass over the
table; ``messages`` itself is not touched: no rebuild, its rowids stay).

Postgres: a GIN index on ``(user_id, content_tsv)`` (``btree_gin``, a trusted extension
shipped with Postgres) replaces the one on ``content_tsv`` alone: the index intersects the
user's entries with the words' before any row is read. The same for titles:
``(user_id, title_tsv)``. ``CREATE INDEX`` locks writes to the table while it builds.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 02:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _sqlite_fts(columns: tuple[str, ...]) -> tuple[str, ...]:
    """``messages_fts`` over ``columns`` of ``messages`` with its triggers, rebuilt."""
    names = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    return (
        "DROP TRIGGER IF EXISTS messages_fts_update",
        "DROP TRIGGER IF EXISTS messages_fts_delete",
        "DROP TRIGGER IF EXISTS messages_fts_insert",
        "DROP TABLE IF EXISTS messages_fts",
        f"CREATE VIRTUAL TABLE messages_fts USING fts5({names}, content='messages', "
        "content_rowid='rowid', tokenize='porter unicode61')",
        "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "  # noqa: S608 (column names)
        f"INSERT INTO messages_fts(rowid, {names}) VALUES (new.rowid, {new}); END",
        "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "  # noqa: S608 (column names)
        f"INSERT INTO messages_fts(messages_fts, rowid, {names}) "
        f"VALUES ('delete', old.rowid, {old}); END",
        "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN "  # noqa: S608 (column names)
        f"INSERT INTO messages_fts(messages_fts, rowid, {names}) "
        f"VALUES ('delete', old.rowid, {old}); "
        f"INSERT INTO messages_fts(rowid, {names}) VALUES (new.rowid, {new}); END",
        "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    )


_POSTGRES_UP = (
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    "CREATE INDEX ix_messages_user_content_tsv ON messages USING gin (user_id, content_tsv)",
    "DROP INDEX IF EXISTS ix_messages_content_tsv",
    "CREATE INDEX ix_chats_user_title_tsv ON chats USING gin (user_id, title_tsv)",
    "DROP INDEX IF EXISTS ix_chats_title_tsv",
)
_POSTGRES_DOWN = (
    "CREATE INDEX ix_chats_title_tsv ON chats USING gin (title_tsv)",
    "DROP INDEX IF EXISTS ix_chats_user_title_tsv",
    "CREATE INDEX ix_messages_content_tsv ON messages USING gin (content_tsv)",
    "DROP INDEX IF EXISTS ix_messages_user_content_tsv",
)


def upgrade() -> None:
    sqlite = _sqlite_fts(("content", "user_id"))
    for statement in sqlite if _is_sqlite() else _POSTGRES_UP:
        op.execute(statement)


def downgrade() -> None:
    sqlite = _sqlite_fts(("content",))
    for statement in sqlite if _is_sqlite() else _POSTGRES_DOWN:
        op.execute(statement)


def _is_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"
