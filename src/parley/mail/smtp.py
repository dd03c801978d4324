"""Sending one mail over SMTP with aiosmtplib (STARTTLS, TLS or plain; login when set), and
asking the server whether it answers — what the api asks before it promises a mail."""

from __future__ import annotations

import ssl
import time
from email.message import EmailMessage

import aiosmtplib

from parley.mail.settings import MailSecurity, MailSettings

REACHABLE_SECONDS = 15  # a good answer from the server is trusted this long


class MailDown(Exception):
    """The server could not be reached or refused the mail."""


class Smtp:
    def __init__(self, settings: MailSettings) -> None:
        self._settings = settings
        self._checked_at = 0.0

    def _client(self) -> aiosmtplib.SMTP:
        s = self._settings
        context = ssl.create_default_context(cafile=s.ca_file) if s.ca_file else None
        return aiosmtplib.SMTP(
            hostname=s.host,
            port=s.port,
            use_tls=s.security is MailSecurity.TLS,
            start_tls=s.security is MailSecurity.STARTTLS,
            username=s.username,
            password=s.password.get_secret_value() if s.password else None,
            tls_context=context,
            timeout=s.timeout_seconds,
        )

    async def send(self, to: str, subject: str, body: str) -> None:
        message = EmailMessage()
        message["From"] = self._settings.from_address
        message["To"] = to
        message["Subject"] = subject
        message.set_content(body)
        try:
            client = self._client()
            async with client:
                await client.send_message(message)
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as e:
            self._checked_at = 0.0
            raise MailDown(f"{type(e).__name__}: {e}") from e
        self._checked_at = time.monotonic()

    async def reachable(self) -> bool:
        """Whether the server answers (and takes our login), trusted a while once it has."""
        if time.monotonic() - self._checked_at < REACHABLE_SECONDS:
            return True
        try:
            client = self._client()
            async with client:
                await client.noop()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            return False
        self._checked_at = time.monotonic()
        return True
