"""chats pinned, shelved (the user's archive) and instructed; users' instructions; feedback

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-28 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHAT_COLUMNS = ("pinned_at", "shelved_at", "instructions")


def upgrade() -> None:
    op.add_column("chats", sa.Column("pinned_at", sa.DateTime(timezone=True)))
    op.add_column("chats", sa.Column("shelved_at", sa.DateTime(timezone=True)))
    op.add_column("chats", sa.Column("instructions", sa.Text()))
    op.add_column("users", sa.Column("instructions", sa.Text()))
    op.create_table(
        "feedback",
        sa.Column("message_id", sa.String(40), primary_key=True),
        sa.Column(
            "user_id", sa.String(40), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("chat_id", sa.String(40), nullable=False),
        sa.Column("rating", sa.SmallInteger(), nullable=False),
        sa.Column("note", sa.Text()),
        sa.Column("model", sa.String(200)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_feedback_user_chat", "feedback", ["user_id", "chat_id"])


def downgrade() -> None:
    op.drop_index("ix_feedback_user_chat", table_name="feedback")
    op.drop_table("feedback")
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table, column in [*(("chats", c) for c in CHAT_COLUMNS), ("users", "instructions")]:
        if sqlite:  # as 0019: no table rebuilt under its keys
            op.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        else:
            op.drop_column(table, column)
