"""The migrations build exactly the schema the code declares (``store/schema.py``), on
SQLite and on Postgres: a column, index or nullability changed in one place but not the
other is a difference here."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

import parley.store.account_tokens
import parley.store.audit
import parley.store.embeddings
import parley.store.engine_reports
import parley.store.identities
import parley.store.mail_outbox
import parley.store.scim
import parley.store.tool_grants  # noqa: F401  (tool_clients, tool_grants)
from parley.store.database import Database
from parley.store.schema import Base


def _differences(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": False})
    return [d for d in compare_metadata(context, Base.metadata) if not _ignored(d)]


# full-text search, kept by the database itself (migrations 0008, 0011): no part of the ORM
_UNMAPPED = ("messages_fts", "content_tsv", "chats_fts", "title_tsv")


def _ignored(diff: Any) -> bool:
    """alembic's own version table and the search index are no part of the declared schema."""
    text = repr(diff)
    return "alembic_version" in text or any(name in text for name in _UNMAPPED)


async def test_migrations_match_the_declared_schema(database_url: str) -> None:
    db = Database(database_url)
    try:
        async with db.engine.connect() as conn:
            differences = await conn.run_sync(_differences)
    finally:
        await db.dispose()
    assert differences == []
