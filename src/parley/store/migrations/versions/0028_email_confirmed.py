"""users.email_confirmed_at: when the mailed link was followed (earlier accounts: confirmed)

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("users", sa.Column("email_confirmed_at", sa.DateTime(timezone=True)))
    op.execute("UPDATE users SET email_confirmed_at = created_at")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # as 0019: no table rebuilt under its keys
        op.execute(sa.text("ALTER TABLE users DROP COLUMN email_confirmed_at"))
    else:
        op.drop_column("users", "email_confirmed_at")
