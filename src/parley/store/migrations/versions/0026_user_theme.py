"""users.theme: how the web client looks for a user (system, light, dark)

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 10:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "users", sa.Column("theme", sa.String(length=10), server_default="system", nullable=False)
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # as 0019: no table rebuilt under its keys
        op.execute(sa.text("ALTER TABLE users DROP COLUMN theme"))
    else:
        op.drop_column("users", "theme")
