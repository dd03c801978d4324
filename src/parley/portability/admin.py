"""``parley user export EMAIL --out FILE`` (a user's data on request: the data-portability
duty of a service that keeps people's conversations) and ``parley user delete EMAIL``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the database's libraries are imported when a command runs, not to build the parser
if TYPE_CHECKING:
    from parley.archive.archiver import Archiver
    from parley.config import Settings
    from parley.store.database import Database


def add_data_parsers(user_sub: Any, settings_args: Any) -> None:
    export = user_sub.add_parser("export", help="write one user's export zip (all their chats)")
    settings_args(export)
    export.add_argument("email")
    export.add_argument("--out", required=True, help="the zip to write")
    export.set_defaults(handler=user_export)
    delete = user_sub.add_parser(
        "delete", help="delete a user with all their chats, archived chats and exports"
    )
    settings_args(delete)
    delete.add_argument("email")
    delete.add_argument("--yes", action="store_true", help="really delete (no prompt)")
    delete.set_defaults(handler=user_delete)


async def user_export(args: argparse.Namespace, settings: Settings) -> int:
    from parley.portability.archive_file import write_export

    db, archiver = await _open(settings)
    try:
        user_id = await _user_id(db, args.email)
        if user_id is None:
            return _fail(f"no user with email {args.email!r}")
        with Path(args.out).open("wb") as out:  # noqa: ASYNC230 - the CLI's one task
            written = await write_export(db, archiver, user_id, out)
    finally:
        await db.dispose()
    print(f"wrote {args.out}: {written.chats} chats, {written.messages} messages")
    return 0


async def user_delete(args: argparse.Namespace, settings: Settings) -> int:
    from parley.store import users

    if not args.yes:
        return _fail("deleting a user deletes all their data: add --yes to go ahead")
    db, archiver = await _open(settings)
    try:
        user_id = await _user_id(db, args.email)
        if user_id is None:
            return _fail(f"no user with email {args.email!r}")
        objects = await archiver.delete_user_objects(user_id)  # objects first: see the route
        async with db.transaction() as s:
            await users.delete_user(s, user_id)
    finally:
        await db.dispose()
    print(f"deleted {args.email} ({user_id}) and {objects} stored objects")
    return 0


async def _open(settings: Settings) -> tuple[Database, Archiver]:
    from parley.archive.archiver import Archiver
    from parley.store.database import Database
    from parley.store.migrate import upgrade

    db = Database(settings.database.resolved_url)
    await upgrade(db)
    return db, Archiver.from_settings(db, settings.blobs, settings.archive, settings.data_dir)


async def _user_id(db: Database, email: str) -> str | None:
    from parley.store import users

    async with db.transaction() as s:
        user = await users.find_user_by_email(s, email)
    return None if user is None else user.id


def _fail(message: str) -> int:
    print(f"parley: {message}", file=sys.stderr)
    return 1
