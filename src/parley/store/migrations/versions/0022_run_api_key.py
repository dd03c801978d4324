"""runs: ``api_key_id``, the API key a run was asked with (usage per key)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 07:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("api_key_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE runs DROP COLUMN api_key_id"))
    else:
        op.drop_column("runs", "api_key_id")
