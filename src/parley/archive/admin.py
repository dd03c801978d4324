"""``parley archive`` (move idle chats to the blob store now) and ``parley stats`` (what the
database and the archive hold), for the operator."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

# the database's libraries are imported when a command runs, not to build the parser
if TYPE_CHECKING:
    from parley.config import Settings


def add_archive_parsers(sub: Any, settings_args: Callable[[argparse.ArgumentParser], None]) -> None:
    archive = sub.add_parser(
        "archive", help="move chats idle longer than archive.after_days to the blob store"
    )
    settings_args(archive)
    archive.add_argument(
        "--idle-days", type=float, help="this many days instead of archive.after_days"
    )
    archive.set_defaults(handler=run_archive)
    stats = sub.add_parser("stats", help="chats, messages and archived bytes")
    settings_args(stats)
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.set_defaults(handler=show_stats)


async def run_archive(args: argparse.Namespace, settings: Settings) -> int:
    if args.idle_days is not None and args.idle_days < 0:
        print("parley: --idle-days must not be negative", file=sys.stderr)
        return 2
    from parley.archive.archiver import Archiver
    from parley.store.database import Database
    from parley.store.migrate import upgrade

    db = Database(settings.database.resolved_url)
    try:
        await upgrade(db)
        mover = Archiver.from_settings(db, settings.blobs, settings.archive, settings.data_dir)
        await mover.blobs.check()
        idle = None if args.idle_days is None else timedelta(days=args.idle_days)
        report = await mover.archive_due(idle_for=idle)
    finally:
        await db.dispose()
    print(
        f"archived {report.archived} chats ({report.bytes} bytes) to {mover.blobs.description}; "
        f"{report.skipped} moved on meanwhile, {report.failed} failed"
    )
    for error in report.errors:
        print(f"  {error}")
    return 1 if report.failed else 0


async def show_stats(args: argparse.Namespace, settings: Settings) -> int:
    from parley.store import archives
    from parley.store.database import Database
    from parley.store.migrate import upgrade

    db = Database(settings.database.resolved_url)
    try:
        await upgrade(db)
        async with db.transaction() as s:
            totals = await archives.totals(s)
    finally:
        await db.dispose()
    figures = {
        "chats": totals.chats,
        "archived_chats": totals.archived_chats,
        "archived_bytes": totals.archived_bytes,
        "messages_in_database": totals.messages,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}\t{value}")
    return 0
