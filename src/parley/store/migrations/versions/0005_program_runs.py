"""runs: runs of programs (the /v1 API) need no chat; their input, output and trace context

A run made through ``POST /v1/chat/completions`` carries its own messages and sampling
parameters (``input``, JSON), keeps its answer on the row (``output``) unless the caller
asked for a chat, and is told apart by ``source``. ``traceparent`` carries the W3C trace
context of the request that made the run, from the api to whichever worker takes it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SOURCE = sa.Enum(
    "chat", "api", name="run_source", native_enum=False, create_constraint=True, length=20
)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("chat_id", existing_type=sa.String(40), nullable=True)
        batch_op.alter_column("user_message_id", existing_type=sa.String(40), nullable=True)
        batch_op.alter_column("assistant_message_id", existing_type=sa.String(40), nullable=True)
        batch_op.add_column(sa.Column("source", _SOURCE, nullable=False, server_default="chat"))
        batch_op.add_column(sa.Column("input", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("output", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("traceparent", sa.String(55), nullable=True))
        batch_op.create_index("ix_runs_user_created", ["user_id", "created_at", "id"])


def downgrade() -> None:
    op.execute("DELETE FROM runs WHERE chat_id IS NULL")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_user_created")
        batch_op.drop_column("traceparent")
        batch_op.drop_column("output")
        batch_op.drop_column("input")
        batch_op.drop_column("source")
        batch_op.alter_column("assistant_message_id", existing_type=sa.String(40), nullable=False)
        batch_op.alter_column("user_message_id", existing_type=sa.String(40), nullable=False)
        batch_op.alter_column("chat_id", existing_type=sa.String(40), nullable=False)
