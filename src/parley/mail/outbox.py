"""The outbox's delivery: every ``poll_seconds`` the due mails are taken (one process each),
composed (what a ``kind`` says is written when it is sent: a reset request becomes a link
only for an account that has a password) and sent; a failure is tried again after
``retry_seconds``, doubling, until ``give_up_seconds``. A mail server down loses nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from parley.domain import utcnow
from parley.mail.settings import MailSettings
from parley.mail.smtp import MailDown, Smtp
from parley.store import mail_outbox
from parley.store.database import Database
from parley.store.mail_outbox import OutboxMail

log = logging.getLogger(__name__)
BATCH = 20


@dataclass(frozen=True, slots=True)
class Letter:
    to: str
    subject: str
    body: str


Composer = Callable[[OutboxMail], Awaitable[Letter | None]]


class Outbox:
    def __init__(self, db: Database, settings: MailSettings, smtp: Smtp) -> None:
        self._db = db
        self._settings = settings
        self.smtp = smtp

    async def deliver_forever(self, compose: Composer) -> None:
        while True:
            try:
                await self.deliver_due(compose)
            except Exception:
                log.exception("mail: reading the outbox failed")
            await asyncio.sleep(self._settings.poll_seconds)

    async def deliver_due(self, compose: Composer) -> int:
        """Send what is due now; how many were sent."""
        hold = timedelta(seconds=self._settings.timeout_seconds * 3)
        async with self._db.transaction() as s:
            waiting = await mail_outbox.due(s, BATCH)
        done = 0
        for mail in waiting:
            async with self._db.transaction() as s:
                if not await mail_outbox.take(s, mail, hold):
                    continue
            done += await self._deliver(mail, compose)
        return done

    async def _deliver(self, mail: OutboxMail, compose: Composer) -> int:
        try:
            letter = await compose(mail)
            if letter is not None:
                await self.smtp.send(letter.to, letter.subject, letter.body)
        except MailDown as e:
            await self._failed(mail, str(e))
            return 0
        async with self._db.transaction() as s:
            await mail_outbox.sent(s, mail.id)
        return 1 if letter is not None else 0

    async def _failed(self, mail: OutboxMail, error: str) -> None:
        age = (utcnow() - mail.created_at).total_seconds()
        async with self._db.transaction() as s:
            if age > self._settings.give_up_seconds:
                log.error("mail: %s to %s given up after %d tries", mail.kind, mail.address,
                          mail.attempts + 1)  # fmt: skip
                await mail_outbox.sent(s, mail.id)
                return
            wait = self._settings.retry_seconds * 2 ** min(mail.attempts, 10)
            log.warning("mail: %s not sent (%s); again in %.0f s", mail.kind, error, wait)
            await mail_outbox.failed(s, mail.id, error, timedelta(seconds=wait))
