"""tool_clients and tool_grants: MCP servers connected with the user's own account

``tool_clients``: parley's registration with a server's authorization server (encrypted);
``tool_grants``: each user's tokens for a server (encrypted), deleted with the user.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tool_clients",
        sa.Column("server", sa.String(length=40), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("server", name=op.f("pk_tool_clients")),
    )
    op.create_table(
        "tool_grants",
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("server", sa.String(length=40), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_tool_grants_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("user_id", "server", name=op.f("pk_tool_grants")),
    )


def downgrade() -> None:
    op.drop_table("tool_grants")
    op.drop_table("tool_clients")
