"""scim_resources, scim_members: what identity providers provisioned over SCIM

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "scim_resources",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=True),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("external_id", sa.String(length=300), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_scim_resources_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scim_resources")),
        sa.UniqueConstraint("user_id", name=op.f("uq_scim_resources_user_id")),
    )
    op.create_index("ix_scim_resources_kind_name", "scim_resources", ["kind", "name"])
    op.create_index(op.f("ix_scim_resources_external_id"), "scim_resources", ["external_id"])
    op.create_table(
        "scim_members",
        sa.Column("group_id", sa.String(length=40), nullable=False),
        sa.Column("member_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["scim_resources.id"],
            name=op.f("fk_scim_members_group_id_scim_resources"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["member_id"],
            ["scim_resources.id"],
            name=op.f("fk_scim_members_member_id_scim_resources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_scim_members")),
    )
    op.create_index(op.f("ix_scim_members_member_id"), "scim_members", ["member_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_scim_members_member_id"), table_name="scim_members")
    op.drop_table("scim_members")
    op.drop_index(op.f("ix_scim_resources_external_id"), table_name="scim_resources")
    op.drop_index("ix_scim_resources_kind_name", table_name="scim_resources")
    op.drop_table("scim_resources")
