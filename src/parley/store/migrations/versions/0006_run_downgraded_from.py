"""runs and messages: downgraded_from, the model asked for when shedding chose another

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("runs", "messages"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("downgraded_from", sa.String(length=200), nullable=True))


def downgrade() -> None:
    for table in ("messages", "runs"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("downgraded_from")
