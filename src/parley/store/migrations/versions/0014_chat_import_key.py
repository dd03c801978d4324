"""chats: ``import_key``, what an imported chat was in the file it came from

A chat made by an import keeps ``<source>:<id in the source>`` (``parley:<chat id>`` of a
parley export, ``chatgpt:<conversation id>``; a conversation without an id, a hash of its
content): importing the same file again finds the chats it already made and skips them
(``store/imports.py``). Looked up by the user's own keys: an index on (user_id, import_key).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("chats", sa.Column("import_key", sa.String(300), nullable=True))
    op.create_index("ix_chats_user_import_key", "chats", ["user_id", "import_key"])


def downgrade() -> None:
    op.drop_index("ix_chats_user_import_key", table_name="chats")
    op.drop_column("chats", "import_key")
