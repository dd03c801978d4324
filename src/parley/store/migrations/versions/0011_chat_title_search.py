"""chats: full-text search over titles, kept current by the database

Search across a user's chats (``store/chat_search.py``) matches titles as well as messages;
messages use migration 0008's index (the one retrieval uses). SQLite: ``chats_fts``, an
FTS5 external-content table over ``chats.title`` (by the implicit rowid; porter stemming, as
``messages_fts``), kept current by triggers. Postgres: ``chats.title_tsv``, a stored
generated ``tsvector`` (english) of the title, GIN-indexed. An archived chat keeps its row,
so its title stays searchable.

Plain CREATE / ADD COLUMN only (no table rebuild: on SQLite that would drop 0008's
triggers); downgrade by plain DROP. As for 0008: anything that rebuilds ``chats`` or
renumbers its rowids (a VACUUM may) must recreate the triggers and run
``INSERT INTO chats_fts(chats_fts) VALUES ('rebuild')``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_UP = (
    "CREATE VIRTUAL TABLE chats_fts USING fts5(title, content='chats', "
    "content_rowid='rowid', tokenize='porter unicode61')",
    "CREATE TRIGGER chats_fts_insert AFTER INSERT ON chats BEGIN "
    "INSERT INTO chats_fts(rowid, title) VALUES (new.rowid, new.title); END",
    "CREATE TRIGGER chats_fts_delete AFTER DELETE ON chats BEGIN "
    "INSERT INTO chats_fts(chats_fts, rowid, title) "
    "VALUES ('delete', old.rowid, old.title); END",
    "CREATE TRIGGER chats_fts_update AFTER UPDATE OF title ON chats BEGIN "
    "INSERT INTO chats_fts(chats_fts, rowid, title) "
    "VALUES ('delete', old.rowid, old.title); "
    "INSERT INTO chats_fts(rowid, title) VALUES (new.rowid, new.title); END",
    "INSERT INTO chats_fts(chats_fts) VALUES ('rebuild')",
)
_SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS chats_fts_update",
    "DROP TRIGGER IF EXISTS chats_fts_delete",
    "DROP TRIGGER IF EXISTS chats_fts_insert",
    "DROP TABLE IF EXISTS chats_fts",
)
_POSTGRES_UP = (
    "ALTER TABLE chats ADD COLUMN title_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, left(title, 10000))) STORED",
    "CREATE INDEX ix_chats_title_tsv ON chats USING gin (title_tsv)",
)
_POSTGRES_DOWN = (
    "DROP INDEX IF EXISTS ix_chats_title_tsv",
    "ALTER TABLE chats DROP COLUMN IF EXISTS title_tsv",
)


def upgrade() -> None:
    for statement in _SQLITE_UP if _sqlite() else _POSTGRES_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in _SQLITE_DOWN if _sqlite() else _POSTGRES_DOWN:
        op.execute(statement)


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"
