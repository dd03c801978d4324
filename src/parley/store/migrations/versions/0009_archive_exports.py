"""chats can be archived to the blob store; users' exports are jobs

``chats.archived_at`` / ``archive_key`` / ``archive_bytes``: an archived chat's messages and
runs live in one compressed object under ``archive_key`` (``archive/``), no longer in the
database. ``exports``: a user's export of all their chats, made in the background, its file
in the blob store until ``expires_at`` (``portability/jobs.py``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATUS = sa.Enum(
    "pending",
    "ready",
    "failed",
    "expired",
    name="export_status",
    native_enum=False,
    create_constraint=True,
    length=20,
)


def upgrade() -> None:
    with op.batch_alter_table("chats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("archive_key", sa.String(300), nullable=True))
        batch_op.add_column(sa.Column("archive_bytes", sa.Integer(), nullable=True))
    op.create_table(
        "exports",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("status", _STATUS, nullable=False),
        sa.Column("blob_key", sa.String(300), nullable=True),
        sa.Column("bytes", sa.Integer(), nullable=True),
        sa.Column("chats", sa.Integer(), nullable=True),
        sa.Column("messages", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_exports_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exports")),
    )
    op.create_index("ix_exports_user_created", "exports", ["user_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_exports_user_created", table_name="exports")
    op.drop_table("exports")
    # plain DROP COLUMN (SQLite 3.35+): a batch rebuild of chats fails while foreign keys
    # point at it, and would drop migration 0008's triggers on messages
    for column in ("archive_bytes", "archive_key", "archived_at"):
        op.execute(f"ALTER TABLE chats DROP COLUMN {column}")
