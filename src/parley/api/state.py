"""What the app is built from: the settings and the services, made by the caller."""

from __future__ import annotations

from dataclasses import dataclass

from parley.accounts.passwords import Passwords
from parley.accounts.service import Accounts
from parley.accounts.throttle import MemoryLoginThrottle
from parley.config import Settings
from parley.store.database import Database


@dataclass(slots=True)
class Services:
    settings: Settings
    db: Database
    accounts: Accounts

    async def close(self) -> None:
        await self.db.dispose()


def build_services(settings: Settings, *, passwords: Passwords | None = None) -> Services:
    db = Database(settings.resolved_database_url, echo=settings.database_echo)
    throttle = MemoryLoginThrottle(
        free_failures=settings.login_free_failures,
        window=settings.login_failure_window_seconds,
        max_delay=settings.login_max_delay_seconds,
    )
    accounts = Accounts(db, settings, passwords or Passwords(), throttle)
    return Services(settings=settings, db=db, accounts=accounts)
