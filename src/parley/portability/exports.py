"""Users' exports as background jobs, handed out by short-lived links.

``start`` records a pending export and writes it in a task of this process: the zip
(``archive_file.write_export``) goes to the blob store under the user's prefix, and the row
becomes ``ready`` until ``export_keep_seconds`` later. A link names the export and an expiry
signed with the service's secret (HMAC-SHA256), valid ``export_link_seconds``: it needs no
session, so a browser's download or ``curl`` can fetch it, and it is worthless once expired
or for any other export. ``maintain_forever`` fails exports whose process went silent
(nothing stays pending forever) and deletes expired files.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import tempfile
import time
from datetime import timedelta

from parley.archive.archiver import Archiver, user_prefix
from parley.blobs.settings import PortabilitySettings
from parley.domain import ExportStatus, utcnow
from parley.errors import Conflict, NotFound
from parley.portability.archive_file import write_export
from parley.store import export_jobs
from parley.store.database import Database
from parley.store.schema import Export

log = logging.getLogger(__name__)

MAINTAIN_SECONDS = 60


class LinkExpired(NotFound):
    code = "export_link_invalid"


def export_key(user_id: str, export_id: str) -> str:
    return f"{user_prefix(user_id)}exports/{export_id}.zip"


class Exports:
    def __init__(
        self, db: Database, archiver: Archiver, settings: PortabilitySettings, secret: str
    ) -> None:
        self.db = db
        self.archiver = archiver
        self.settings = settings
        self._secret = hashlib.sha256(b"parley-export-links:" + secret.encode()).digest()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, user_id: str) -> Export:
        async with self.db.transaction() as s:
            row = await export_jobs.create_export(s, user_id=user_id)
        task = asyncio.create_task(self._make(row.id, user_id), name=f"export {row.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return row

    async def _make(self, export_id: str, user_id: str) -> None:
        try:
            size, chats, messages = await self._write(export_id, user_id)
        except Exception as e:
            log.exception("export %s failed", export_id)
            async with self.db.transaction() as s:
                await export_jobs.finish(s, export_id, status=ExportStatus.FAILED, error=str(e))
            return
        expires = utcnow() + timedelta(seconds=self.settings.export_keep_seconds)
        async with self.db.transaction() as s:
            await export_jobs.finish(
                s,
                export_id,
                status=ExportStatus.READY,
                blob_key=export_key(user_id, export_id),
                bytes=size,
                chats=chats,
                messages=messages,
                expires_at=expires,
            )

    async def _write(self, export_id: str, user_id: str) -> tuple[int, int, int]:
        with tempfile.TemporaryFile() as out:
            written = await write_export(self.db, self.archiver, user_id, out)
            out.seek(0)
            data = out.read()
        await self.archiver.blobs.put(export_key(user_id, export_id), data)
        return len(data), written.chats, written.messages

    async def get(self, user_id: str, export_id: str) -> Export:
        async with self.db.transaction() as s:
            return await export_jobs.get_export(s, user_id=user_id, export_id=export_id)

    async def list(self, user_id: str) -> list[Export]:
        async with self.db.transaction() as s:
            return await export_jobs.list_exports(s, user_id=user_id)

    def link_token(self, export_id: str, *, now: float | None = None) -> tuple[str, int]:
        """A token for the export's download, and when it expires (unix seconds)."""
        expires = int((time.time() if now is None else now) + self.settings.export_link_seconds)
        return f"{expires}.{self._sign(export_id, expires)}", expires

    async def download(self, export_id: str, token: str) -> tuple[Export, bytes]:
        """The export's file, if ``token`` is a live link to it (NotFound otherwise: a link
        says nothing of why it does not work to someone who holds a wrong one)."""
        if not self._valid(export_id, token):
            raise LinkExpired("this download link is invalid or has expired; ask for a new one")
        async with self.db.transaction() as s:
            export = await export_jobs.get_export(s, user_id=None, export_id=export_id)
        if export.status is not ExportStatus.READY or export.blob_key is None:
            raise Conflict(f"the export is {export.status.value}", code="export_not_ready")
        return export, await self.archiver.blobs.get(export.blob_key)

    def _valid(self, export_id: str, token: str) -> bool:
        expires_text, _, signature = token.partition(".")
        if not (expires_text.isascii() and expires_text.isdigit()) or len(expires_text) > 12:
            return False
        expires = int(expires_text)
        good = hmac.compare_digest(signature.encode(), self._sign(export_id, expires).encode())
        return good and expires >= time.time()

    def _sign(self, export_id: str, expires: int) -> str:
        message = f"{export_id}:{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    async def maintain(self) -> None:
        """Fail exports silent past ``export_stale_seconds``; delete expired files."""
        now = utcnow()
        silent_since = now - timedelta(seconds=self.settings.export_stale_seconds)
        async with self.db.transaction() as s:
            stale = await export_jobs.stale_pending(s, silent_since=silent_since)
            expired = await export_jobs.expired(s, now=now)
        for export in stale:
            async with self.db.transaction() as s:
                await export_jobs.finish(
                    s, export.id, status=ExportStatus.FAILED, error="the export stopped; retry"
                )
        for export in expired:
            if export.blob_key is not None:
                await self.archiver.blobs.delete(export.blob_key)
            async with self.db.transaction() as s:
                await export_jobs.mark(s, export.id, ExportStatus.EXPIRED, None)

    async def maintain_forever(self) -> None:
        while True:
            await asyncio.sleep(MAINTAIN_SECONDS)
            try:
                await self.maintain()
            except Exception:
                log.exception("export maintenance failed")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
