"""sessions: when each was last used (the idle timeout, the list of a user's sessions)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    # a session made before this revision was last seen in use, as far as anyone knows, when
    # it was made
    op.execute("UPDATE sessions SET last_used_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("last_used_at")
