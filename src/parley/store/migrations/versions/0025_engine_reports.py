"""engine_reports: what each process serving models last said of its engines

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "engine_reports",
        sa.Column("worker_id", sa.String(length=100), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_engine_reports")),
    )


def downgrade() -> None:
    op.drop_table("engine_reports")
