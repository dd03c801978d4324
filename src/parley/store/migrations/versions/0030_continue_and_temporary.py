"""runs that continue a cut answer (continues_id) and runs of temporary chats (ephemeral)

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-28 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("continues_id", "ephemeral")


def upgrade() -> None:
    # the answer a run continues (its text is the new answer's start); no key: the answer
    # may be deleted with its branch while the run's row stays for its usage
    op.add_column("runs", sa.Column("continues_id", sa.String(40)))
    # a temporary chat's run: its conversation only on the bus, its answer only on the stream
    op.add_column(
        "runs", sa.Column("ephemeral", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for column in COLUMNS:
        if sqlite:  # as 0019: no table rebuilt under its keys
            op.execute(sa.text(f"ALTER TABLE runs DROP COLUMN {column}"))
        else:
            op.drop_column("runs", column)
