"""``parley runs refused``: the runs the content policy refused, for the operator.

Newest first: when, the run and its user, the stage (``input``: a prompt refused before
admission; ``output``: an answer stopped while it streamed), the code (``content_blocked``
or ``moderation_unavailable``) and the reason the user was given. ``--json`` prints one
object a line, for scripts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from parley.domain import CONTENT_BLOCKED, MODERATION_UNAVAILABLE, utcnow

# the database's libraries are imported when a command runs, not to build the parser
if TYPE_CHECKING:
    from parley.config import Settings
    from parley.store import refusals

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_runs_parser(sub: Any, settings_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """``parley runs refused``."""
    runs = sub.add_parser("runs", help="look into runs")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    refused = runs_sub.add_parser(
        "refused", help="list the runs the content policy refused, newest first"
    )
    settings_args(refused)
    refused.add_argument("--limit", type=int, default=50, help="at most this many (50)")
    refused.add_argument("--since", type=duration, help="within this long: 30m, 24h, 7d")
    refused.add_argument("--user", help="only this user's (email)")
    refused.add_argument("--json", action="store_true", help="one JSON object a line")
    refused.set_defaults(handler=list_refused)


def duration(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30m, 24h or 7d")
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


async def list_refused(args: argparse.Namespace, settings: Settings) -> int:
    from parley.store import refusals
    from parley.store.database import Database
    from parley.store.migrate import upgrade
    from parley.store.users import normalize_email

    if args.limit <= 0:
        print("parley: --limit must be positive", file=sys.stderr)
        return 2
    db = Database(settings.database.resolved_url)
    try:
        await upgrade(db)
        async with db.transaction() as s:
            rows = await refusals.refused_runs(
                s,
                codes=(CONTENT_BLOCKED, MODERATION_UNAVAILABLE),
                since=utcnow() - args.since if args.since else None,
                email=normalize_email(args.user) if args.user else None,
                limit=args.limit,
            )
    finally:
        await db.dispose()
    for row in rows:
        line = _fields(row)
        print(json.dumps(line) if args.json else "\t".join(str(v or "-") for v in line.values()))
    return 0


def _fields(row: refusals.RefusedRun) -> dict[str, str | None]:
    run = row.run
    return {
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "run_id": run.id,
        "user": row.email,
        "tier": run.tier,
        "chat_id": run.chat_id,
        "stage": row.stage,
        "code": run.error_code,
        "message": run.error_message,
    }
