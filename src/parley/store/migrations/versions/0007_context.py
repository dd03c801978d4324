"""chats keep a rolling summary; runs record their prompt's composition

A long chat's oldest turns are folded into ``chats.summary`` by a background run
(``runs.source`` = ``summary``) that covers the messages up to ``runs.summary_through_seq``;
the chat's summary covers its messages up to ``chats.summary_through_seq``, and
``chats.summary_run_id`` is the fold under way (one at a time). ``runs.prompt_parts`` is
what went into a run's prompt (JSON: tokens per part, which messages); ``runs.cached_tokens``
the prompt tokens the engine found in its prefix cache.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("chat", "api")
_NEW = ("chat", "api", "summary")


def _source(values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(*values, name="run_source", native_enum=False, create_constraint=True, length=20)


def upgrade() -> None:
    with op.batch_alter_table("chats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("summary", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("summary_through_seq", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("summary_run_id", sa.String(40), nullable=True))
        batch_op.add_column(sa.Column("summary_updated_at", sa.DateTime(timezone=True)))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_parts", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("cached_tokens", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("summary_through_seq", sa.Integer(), nullable=True))
        batch_op.alter_column("source", existing_type=_source(_OLD), type_=_source(_NEW))


def downgrade() -> None:
    op.execute("DELETE FROM runs WHERE source = 'summary'")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("source", existing_type=_source(_NEW), type_=_source(_OLD))
        batch_op.drop_column("summary_through_seq")
        batch_op.drop_column("cached_tokens")
        batch_op.drop_column("prompt_parts")
    with op.batch_alter_table("chats", schema=None) as batch_op:
        batch_op.drop_column("summary_updated_at")
        batch_op.drop_column("summary_run_id")
        batch_op.drop_column("summary_through_seq")
        batch_op.drop_column("summary")
