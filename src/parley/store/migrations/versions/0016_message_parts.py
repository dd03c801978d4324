"""messages: ``parts``, what a message holds beyond its text; the ``tool`` role

An answer's reasoning (shown folded, never fed back) and its tool calls, and the call a tool
message answers, as one JSON column (``store/parts.MessageParts``; NULL: none). A tool's
result is a message of its own, of the new role ``tool``.

The role's check constraint takes the new value in place: Postgres drops and makes it again;
SQLite has its table definition edited (``PRAGMA writable_schema``, as SQLite's own
documentation describes for loosening a CHECK), never the table copied and dropped: that
would lose the search index's triggers, and dropping ``messages`` with foreign keys on would
cascade into ``runs``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 03:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK = "ck_messages_message_role"
OLD = "role IN ('system', 'user', 'assistant')"
NEW = "role IN ('system', 'user', 'assistant', 'tool')"


def upgrade() -> None:
    op.add_column("messages", sa.Column("parts", sa.Text(), nullable=True))
    _role_check(OLD, NEW)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM messages WHERE role = 'tool'"))
    _role_check(NEW, OLD)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE messages DROP COLUMN parts"))  # SQLite 3.35+
    else:
        op.drop_column("messages", "parts")


def _role_check(old: str, new: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f(CHECK), "messages", type_="check")
        op.create_check_constraint(op.f(CHECK), "messages", sa.text(new))
        return
    version = bind.execute(sa.text("PRAGMA schema_version")).scalar_one()
    bind.execute(sa.text("PRAGMA writable_schema = ON"))
    bind.execute(
        sa.text(
            "UPDATE sqlite_master SET sql = replace(sql, :old, :new) "
            "WHERE type = 'table' AND name = 'messages'"
        ),
        {"old": f"CHECK ({old})", "new": f"CHECK ({new})"},
    )
    bind.execute(sa.text(f"PRAGMA schema_version = {int(version) + 1}"))
    bind.execute(sa.text("PRAGMA writable_schema = OFF"))
    changed = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'")
    ).scalar_one()
    if f"CHECK ({new})" not in changed:
        raise RuntimeError(f"the role check of messages was not changed: {changed}")
