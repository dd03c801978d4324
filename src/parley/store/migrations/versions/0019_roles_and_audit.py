"""users: ``role`` and ``disabled_at``; the audit log (``audit_records``, ``audit_head``)

A user's role (user, auditor, admin: ``domain.UserRole``) and whether they are disabled;
the audit log's records, chained by hashes, and its head row (made here, so the first
appends never race to make it).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENESIS = "0" * 64


def upgrade() -> None:
    op.add_column(
        "users", sa.Column("role", sa.String(length=20), nullable=False, server_default="user")
    )
    op.add_column("users", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "audit_records",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(length=60), nullable=False),
        sa.Column("actor_id", sa.String(length=40), nullable=True),
        sa.Column("actor", sa.String(length=320), nullable=False),
        sa.Column("target_type", sa.String(length=40), nullable=True),
        sa.Column("target_id", sa.String(length=80), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("address", sa.String(length=100), nullable=True),
        sa.Column("user_agent", sa.String(length=300), nullable=True),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_audit_records")),
    )
    op.create_index("ix_audit_records_actor", "audit_records", ["actor_id", "seq"])
    op.create_index("ix_audit_records_target", "audit_records", ["target_id", "seq"])
    op.create_index("ix_audit_records_at", "audit_records", ["at"])
    head = op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("anchor_seq", sa.Integer(), nullable=False),
        sa.Column("anchor_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_head")),
    )
    op.bulk_insert(
        head, [{"id": 1, "seq": 0, "hash": GENESIS, "anchor_seq": 0, "anchor_hash": GENESIS}]
    )


def downgrade() -> None:
    op.drop_table("audit_head")
    op.drop_index("ix_audit_records_at", table_name="audit_records")
    op.drop_index("ix_audit_records_target", table_name="audit_records")
    op.drop_index("ix_audit_records_actor", table_name="audit_records")
    op.drop_table("audit_records")
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE users DROP COLUMN disabled_at"))
        op.execute(sa.text("ALTER TABLE users DROP COLUMN role"))
    else:
        op.drop_column("users", "disabled_at")
        op.drop_column("users", "role")
