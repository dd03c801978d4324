"""``parley audit verify / export / prune``: the audit log from the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parley.config import Settings


def add_audit_parser(sub: Any, settings_args: Callable[[argparse.ArgumentParser], None]) -> None:
    audit = sub.add_parser("audit", help="the audit log: verify its chain, export, prune")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser(
        "verify", help="check that no record was edited, deleted or moved (exit 1 if one was)"
    )
    settings_args(verify)
    verify.set_defaults(handler=audit_verify)
    export = audit_sub.add_parser("export", help="every record as JSON lines, oldest first")
    settings_args(export)
    export.set_defaults(handler=audit_export)
    prune = audit_sub.add_parser("prune", help="delete records older than audit.retention_days")
    settings_args(prune)
    prune.set_defaults(handler=audit_prune)


async def audit_verify(_: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.admin import open_db
    from parley.audit.log import AuditLog

    db = await open_db(settings)
    try:
        log = AuditLog(db, settings.audit, settings.secret_key.get_secret_value())
        breaks = await log.verify()
        count = await log.count()
    finally:
        await db.dispose()
    for b in breaks:
        print(f"parley: audit record {b.seq}: {b.why}", file=sys.stderr)
    if breaks:
        return 1
    print(f"the audit log holds: {count} records, each as written, none missing or moved")
    return 0


async def audit_export(_: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.admin import open_db
    from parley.audit.log import AuditLog

    db = await open_db(settings)
    try:
        async for line in AuditLog(
            db, settings.audit, settings.secret_key.get_secret_value()
        ).export():
            sys.stdout.write(line)
    finally:
        await db.dispose()
    return 0


async def audit_prune(_: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.admin import open_db
    from parley.audit.log import AuditLog

    db = await open_db(settings)
    try:
        pruned = await AuditLog(db, settings.audit, settings.secret_key.get_secret_value()).prune()
    finally:
        await db.dispose()
    print(f"{pruned} records older than {settings.audit.retention_days} days deleted")
    return 0
