"""messages: full-text search kept current by the database; message_embeddings

Retrieval (``context/retrieval.py``) finds a chat's older messages that match a new one.
SQLite: ``messages_fts``, an FTS5 external-content table over ``messages.content`` (by the
implicit rowid; porter stemming), kept current by triggers (an answer is made empty and its
content UPDATEd when it ends). Postgres: ``messages.content_tsv``, a stored generated
``tsvector`` (english) of the content's first 100,000 characters (a tsvector holds at most
1 MB: a longer message must not fail to be stored), GIN-indexed. ``message_embeddings``
caches one vector per message for the configured embeddings model
(``store/embeddings.py``).

On SQLite the index follows messages by rowid: a later migration that rebuilds ``messages``
(``batch_alter_table``) drops the triggers and may renumber the rows, and so may a VACUUM;
either must be followed by recreating the triggers and
``INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_UP = (
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', "
    "content_rowid='rowid', tokenize='porter unicode61')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
)
_SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS messages_fts_update",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TABLE IF EXISTS messages_fts",
)
_POSTGRES_UP = (
    "ALTER TABLE messages ADD COLUMN content_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, left(content, 100000))) STORED",
    "CREATE INDEX ix_messages_content_tsv ON messages USING gin (content_tsv)",
)
_POSTGRES_DOWN = (
    "DROP INDEX IF EXISTS ix_messages_content_tsv",
    "ALTER TABLE messages DROP COLUMN IF EXISTS content_tsv",
)


def upgrade() -> None:
    for statement in _SQLITE_UP if _sqlite() else _POSTGRES_UP:
        op.execute(statement)
    op.create_table(
        "message_embeddings",
        sa.Column("message_id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("chat_id", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("dims", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_message_embeddings_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_message_embeddings")),
    )


def downgrade() -> None:
    op.drop_table("message_embeddings")
    for statement in _SQLITE_DOWN if _sqlite() else _POSTGRES_DOWN:
        op.execute(statement)


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"
