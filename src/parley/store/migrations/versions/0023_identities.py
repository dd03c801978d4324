"""identities: a user's accounts at OpenID Connect providers (provider, subject)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "identities",
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_identities_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("provider", "subject", name=op.f("pk_identities")),
    )
    op.create_index(op.f("ix_identities_user_id"), "identities", ["user_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_identities_user_id"), table_name="identities")
    op.drop_table("identities")
