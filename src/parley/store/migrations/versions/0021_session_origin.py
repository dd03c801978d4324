"""sessions: ``user_agent`` and ``address``, where each began (to tell them apart)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 07:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("user_agent", sa.String(length=300), nullable=True))
    op.add_column("sessions", sa.Column("address", sa.String(length=100), nullable=True))


def downgrade() -> None:
    for column in ("address", "user_agent"):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(sa.text(f"ALTER TABLE sessions DROP COLUMN {column}"))
        else:
            op.drop_column("sessions", column)
