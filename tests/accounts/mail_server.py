"""A real SMTP server for the tests, as its own process: aiosmtpd, each mail written to a
Maildir. With ``--cert``/``--key``: STARTTLS required and a login (``--user``,
``--password``) before a mail is taken, as a provider's submission port wants.

``MailServer`` starts and stops it and reads what it received."""

from __future__ import annotations

import argparse
import mailbox
import ssl
import subprocess
import sys
import threading
from email.message import Message
from pathlib import Path
from typing import Any

from tests.certificates import self_signed
from tests.processes import free_port
from tests.waiting import eventually, eventually_sync


def main() -> None:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Mailbox
    from aiosmtpd.smtp import AuthResult, LoginPassword

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--maildir", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--user", default="parley")
    parser.add_argument("--password", default="s3cret")
    args = parser.parse_args()
    more: dict[str, Any] = {}
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)

        def login(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
                args.user.encode(),
                args.password.encode(),
            )
            return AuthResult(success=ok)

        more = {"tls_context": context, "require_starttls": True, "auth_required": True,
                "authenticator": login}  # fmt: skip
    server = Controller(Mailbox(args.maildir), hostname="127.0.0.1", port=args.port, **more)
    server.start()
    print("ready", flush=True)
    threading.Event().wait()


class MailServer:
    def __init__(self, tmp: Path, tls: bool = False) -> None:
        self.port = free_port()
        self.maildir = tmp / f"maildir-{self.port}"
        self.tls = tls
        self.cert = tmp / "smtp-cert.pem"
        self._proc: subprocess.Popen[bytes] | None = None
        if tls:
            self.key = tmp / "smtp-key.pem"
            self_signed(self.cert, self.key)

    def settings(self, **more: Any) -> dict[str, Any]:
        """parley's ``mail`` section for this server."""
        found: dict[str, Any] = {"host": "127.0.0.1", "port": self.port, "security": "none",
                                 "from_address": "parley@example.com", "retry_seconds": 0.5,
                                 "poll_seconds": 0.1, "timeout_seconds": 3}  # fmt: skip
        if self.tls:
            found |= {"security": "starttls", "username": "parley", "password": "s3cret",
                      "ca_file": str(self.cert)}  # fmt: skip
        return found | more

    def start(self) -> None:
        command = [sys.executable, "-m", "tests.accounts.mail_server", "--port", str(self.port),
                   "--maildir", str(self.maildir)]  # fmt: skip
        if self.tls:
            command += ["--cert", str(self.cert), "--key", str(self.key)]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self._proc.stdout is not None
        assert self._proc.stdout.readline().strip() == b"ready"

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def messages(self) -> list[Message]:
        if not self.maildir.exists():
            return []
        return list(mailbox.Maildir(str(self.maildir), create=False))

    def received(self, to: str, subject: str, count: int = 1) -> list[Message] | None:
        found = [m for m in self.messages() if m["To"] == to and m["Subject"] == subject]
        return found if len(found) >= count else None

    async def wait_for(self, to: str, subject: str, count: int = 1) -> list[Message]:
        """The mails once ``count`` have come (the server's event loop goes on meanwhile)."""

        async def arrived() -> list[Message] | None:
            return self.received(to, subject, count)

        return await eventually(arrived, f"{count} mail(s) {subject!r} to {to}", timeout=20)

    def wait_for_sync(self, to: str, subject: str, count: int = 1) -> list[Message]:
        return eventually_sync(
            lambda: self.received(to, subject, count), f"mail {subject!r} to {to}", timeout=20
        )


def body(message: Message) -> str:
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


if __name__ == "__main__":
    main()
