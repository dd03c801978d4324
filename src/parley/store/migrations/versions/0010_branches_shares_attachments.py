"""messages form a tree (branches); shared links; attachments

``messages.parent_id``: the message before this one on its branch (NULL: the chat's first);
an edited user message is a sibling of the one it edits (the same parent), a regenerated
answer a sibling of the answer it replaces. ``chats.active_leaf_id``: the newest message of
the branch shown; the prompt and the history follow the path from it to the root. Existing
chats become one branch: each message's parent is the one before it, the leaf the last.
(Plain ADD COLUMN, no foreign key: on SQLite a table rebuild would drop the full-text
triggers of migration 0008.)

``shares``: a read-only snapshot of a chat at an unguessable URL, listed and revoked by its
owner. ``attachments``: a file uploaded to a chat, kept in the blob store, its text
extracted for the prompt.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PARENTS = (
    "UPDATE messages SET parent_id = (SELECT m2.id FROM messages m2 "
    "WHERE m2.chat_id = messages.chat_id AND m2.seq < messages.seq "
    "ORDER BY m2.seq DESC LIMIT 1)"
)
_LEAVES = (
    "UPDATE chats SET active_leaf_id = (SELECT m.id FROM messages m "
    "WHERE m.chat_id = chats.id ORDER BY m.seq DESC LIMIT 1)"
)


def upgrade() -> None:
    op.add_column("messages", sa.Column("parent_id", sa.String(40), nullable=True))
    op.add_column("chats", sa.Column("active_leaf_id", sa.String(40), nullable=True))
    op.create_index("ix_messages_chat_parent", "messages", ["chat_id", "parent_id"])
    op.execute(_PARENTS)
    op.execute(_LEAVES)
    _shares()
    _attachments()


def _shares() -> None:
    op.create_table(
        "shares",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("chat_id", sa.String(40), nullable=False),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("snapshot", sa.Text(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_shares_user_id_users"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["chat_id"], ["chats.id"], name=op.f("fk_shares_chat_id_chats"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shares")),
        sa.UniqueConstraint("token", name=op.f("uq_shares_token")),
    )
    op.create_index("ix_shares_user_created", "shares", ["user_id", "created_at"])


def _attachments() -> None:
    op.create_table(
        "attachments",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("chat_id", sa.String(40), nullable=False),
        sa.Column("message_id", sa.String(40), nullable=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("blob_key", sa.String(300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_attachments_user_id_users"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["chat_id"], ["chats.id"], name=op.f("fk_attachments_chat_id_chats"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attachments")),
    )
    op.create_index("ix_attachments_user_chat", "attachments", ["user_id", "chat_id"])
    op.create_index("ix_attachments_message_id", "attachments", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_attachments_message_id", table_name="attachments")
    op.drop_index("ix_attachments_user_chat", table_name="attachments")
    op.drop_table("attachments")
    op.drop_index("ix_shares_user_created", table_name="shares")
    op.drop_table("shares")
    op.drop_index("ix_messages_chat_parent", table_name="messages")
    op.execute("ALTER TABLE chats DROP COLUMN active_leaf_id")  # plain: see 0009
    op.execute("ALTER TABLE messages DROP COLUMN parent_id")
