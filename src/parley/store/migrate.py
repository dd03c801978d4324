"""Applying the Alembic migrations from code (``parley migrate``, and ``serve`` at start)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection

from parley.store.database import Database

SCRIPT_LOCATION = "parley.store:migrations"
_PG_LOCK_KEY = 7_160_211  # any constant: serialises concurrent migrators on Postgres


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


async def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema up to ``revision``; safe to call from several processes at once."""

    def run(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(run)


async def current_revision(db: Database) -> str | None:
    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with db.engine.connect() as conn:
        return await conn.run_sync(read)
