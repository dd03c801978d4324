"""``parley user create / set-password / set-tier / set-role / disable / enable / list /
export / delete``: users from the command line. Every change is on the audit log, made by
``cli``."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parley.portability.admin import add_data_parsers

# the database's libraries are imported when a command runs, not to build the parser
if TYPE_CHECKING:
    from parley.accounts.management import UserChange
    from parley.config import Settings
    from parley.store.database import Database


def add_user_parser(sub: Any, settings_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """``parley user create / set-tier / list``."""
    user = sub.add_parser("user", help="manage users")
    user_sub = user.add_subparsers(dest="user_command", required=True)
    create = user_sub.add_parser("create", help="create a user")
    settings_args(create)
    create.add_argument("email")
    create.add_argument("--tier")
    create.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    create.set_defaults(handler=user_create)
    set_tier = user_sub.add_parser("set-tier", help="move a user to another tier")
    settings_args(set_tier)
    set_tier.add_argument("email")
    set_tier.add_argument("tier")
    set_tier.set_defaults(handler=user_set_tier)
    set_role = user_sub.add_parser(
        "set-role", help="make a user an admin, an auditor (reads the admin console) or a user"
    )
    settings_args(set_role)
    set_role.add_argument("email")
    set_role.add_argument("role", choices=["user", "auditor", "admin"])
    set_role.set_defaults(handler=user_set_role)
    set_password = user_sub.add_parser(
        "set-password",
        help="set a user's password (read from standard input; every session ends)",
    )
    settings_args(set_password)
    set_password.add_argument("email")
    set_password.set_defaults(handler=user_set_password)
    for verb, disabled in (("disable", True), ("enable", False)):
        state = user_sub.add_parser(verb, help=f"{verb} a user (disabling ends their sessions)")
        settings_args(state)
        state.add_argument("email")
        state.set_defaults(handler=user_disable if disabled else user_enable)
    list_ = user_sub.add_parser("list", help="list users")
    settings_args(list_)
    list_.set_defaults(handler=user_list)
    add_data_parsers(user_sub, settings_args)  # parley user export / delete


async def user_create(args: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.passwords import Passwords
    from parley.accounts.policy import check_password, checked_email
    from parley.audit.actions import Actor, AuditAction, AuditEvent
    from parley.audit.log import AuditLog
    from parley.errors import ValidationFailed
    from parley.store import users

    tier = args.tier or settings.qos.default_tier
    if tier not in settings.qos.tiers:
        return fail(f"unknown tier {tier!r}; tiers: {', '.join(sorted(settings.qos.tiers))}")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
    try:
        email = checked_email(args.email)
        check_password(password, email=email)
    except ValidationFailed as e:
        return fail(e.message)
    db = await open_db(settings)
    try:
        password_hash = await Passwords().hash(password)
        async with db.transaction() as s:
            user = await users.create_user(s, email=email, password_hash=password_hash, tier=tier)
            detail = {"email": email, "tier": tier}
            created = AuditEvent(AuditAction.USER_CREATED, Actor.cli(), "user", user.id, detail)
            await AuditLog(db, settings.audit, settings.secret_key.get_secret_value()).record_in(
                s, created
            )
        print(f"{user.id}\t{user.email}\t{user.tier}")
    except Exception as e:
        return fail(str(e))
    finally:
        await db.dispose()
    return 0


async def user_set_password(args: argparse.Namespace, settings: Settings) -> int:
    """The password from standard input (a prompt at a terminal), never an argument."""
    from parley.accounts.passwords import Passwords
    from parley.accounts.recovery import Recovery
    from parley.audit.actions import Actor
    from parley.audit.log import AuditLog
    from parley.errors import ParleyError

    if sys.stdin.isatty():
        password = getpass.getpass("new password: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    db = await open_db(settings)
    try:
        audit = AuditLog(db, settings.audit, settings.secret_key.get_secret_value())
        recovery = Recovery(db, settings.accounts, None, None, Passwords(), audit, None)
        try:
            user = await recovery.set_password(Actor.cli(), args.email, password)
        except ParleyError as e:
            return fail(e.message)
        print(f"{user.id}\t{user.email}\tpassword set; every session ended")
    finally:
        await db.dispose()
    return 0


async def user_set_tier(args: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.management import UserChange

    return await _change(settings, args.email, UserChange(tier=args.tier))


async def user_set_role(args: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.management import UserChange
    from parley.domain import UserRole

    return await _change(settings, args.email, UserChange(role=UserRole(args.role)))


async def user_disable(args: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.management import UserChange

    return await _change(settings, args.email, UserChange(disabled=True))


async def user_enable(args: argparse.Namespace, settings: Settings) -> int:
    from parley.accounts.management import UserChange

    return await _change(settings, args.email, UserChange(disabled=False))


async def _change(settings: Settings, email: str, change: UserChange) -> int:
    """The change made by the CLI (on the audit log as ``cli``); the user's line after it."""
    from parley.accounts.management import Management
    from parley.audit.actions import Actor
    from parley.audit.log import AuditLog
    from parley.errors import ParleyError
    from parley.store import users

    db = await open_db(settings)
    try:
        async with db.transaction() as s:
            found = await users.find_user_by_email(s, email)
        if found is None:
            return fail(f"no user with email {email!r}")
        audit = AuditLog(db, settings.audit, settings.secret_key.get_secret_value())
        manage = Management(db, audit, list(settings.qos.tiers))
        try:
            user = await manage.change(Actor.cli(), found.id, change, "cli")
        except ParleyError as e:
            return fail(e.message)
        state = "disabled" if user.disabled_at else "active"
        print(f"{user.id}\t{user.email}\t{user.tier}\t{user.role}\t{state}")
    finally:
        await db.dispose()
    return 0


async def user_list(_: argparse.Namespace, settings: Settings) -> int:
    from parley.store import users

    db = await open_db(settings)
    try:
        async with db.transaction() as s:
            rows = await users.list_users(s)
    finally:
        await db.dispose()
    for user in rows:
        state = "disabled" if user.disabled_at else "active"
        created = user.created_at.isoformat()
        print(f"{user.id}\t{user.email}\t{user.tier}\t{user.role}\t{state}\t{created}")
    return 0


async def open_db(settings: Settings) -> Database:
    """The database, migrated to the current schema (operators need not run migrate first)."""
    from parley.store.database import Database
    from parley.store.migrate import upgrade

    db = Database(settings.database.resolved_url)
    await upgrade(db)
    return db


def fail(message: str) -> int:
    print(f"parley: {message}", file=sys.stderr)
    return 1
