"""messages: ``parts``, what a message holds beyond its text; the ``tool`` role

An answer's reasoning (shown folded, never fed back) and its tool calls, and the call a tool
message answers, as one JSON column (``store/parts.MessageParts``; NULL: none). A tool's
result is a message of its own, of the new role ``tool`` (the role's check constraint made
again with it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 03:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK = "ck_messages_message_role"


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch_op:
        batch_op.add_column(sa.Column("parts", sa.Text(), nullable=True))
        batch_op.drop_constraint(op.f(CHECK), type_="check")
        batch_op.create_check_constraint(
            op.f(CHECK), sa.text("role IN ('system', 'user', 'assistant', 'tool')")
        )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM messages WHERE role = 'tool'"))
    with op.batch_alter_table("messages") as batch_op:
        batch_op.drop_constraint(op.f(CHECK), type_="check")
        batch_op.create_check_constraint(
            op.f(CHECK), sa.text("role IN ('system', 'user', 'assistant')")
        )
        batch_op.drop_column("parts")
