"""runs: ``tools``, the server's tools a chat's run may call

``{"names": [...], "first": "auto" | "required"}`` (NULL: none), chosen with the message the
run answers (issue 43); ``first``: whether its first model step must call one.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("tools", sa.Text(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE runs DROP COLUMN tools"))  # SQLite 3.35+
    else:
        op.drop_column("runs", "tools")
