"""api_keys: ``scopes``, ``models``, ``expires_at``, ``last_used_address``

What a key may do (JSON list of scopes; NULL for the keys made before: all but admin),
which models it may use (NULL: any its tier allows), when it expires, and the address of
its last use.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("scopes", "models", "expires_at", "last_used_address")


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("scopes", sa.Text(), nullable=True))
    op.add_column("api_keys", sa.Column("models", sa.Text(), nullable=True))
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_keys", sa.Column("last_used_address", sa.String(length=100), nullable=True))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(sa.text(f"ALTER TABLE api_keys DROP COLUMN {column}"))
        else:
            op.drop_column("api_keys", column)
