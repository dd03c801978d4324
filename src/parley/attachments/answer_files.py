"""The files a tool made during an answer (``run_python``'s writes), kept as attachments of
the answer's message: their bytes in the blob store under the chat's prefix (deleted with
the chat or the account), a row each, listed with the message and downloaded like any file
(``GET /api/attachments/{id}/content``). A text file's text is kept too, so that a later
question in the chat sees it as it sees a file the user sent."""

from __future__ import annotations

import logging
import mimetypes

import anyio

from parley.attachments.extract import file_name
from parley.attachments.service import blob_key
from parley.attachments.settings import AttachmentSettings
from parley.blobs.interface import BlobStore
from parley.domain import new_id, utcnow
from parley.store import attachments
from parley.store.attachments import ID_PREFIX
from parley.store.database import Database
from parley.store.schema import Attachment, Run
from parley.tools.interface import ToolFile

log = logging.getLogger(__name__)

TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


class AnswerFiles:
    def __init__(self, db: Database, blobs: BlobStore, settings: AttachmentSettings) -> None:
        self._db = db
        self._blobs = blobs
        self._settings = settings

    async def keep(self, run: Run, files: list[ToolFile]) -> list[Attachment]:
        """The files, attached to the run's answer (nothing kept if any cannot be)."""
        if not files or run.chat_id is None or run.assistant_message_id is None:
            return []
        rows = [self._row(run, f) for f in files]
        try:
            for row, f in zip(rows, files, strict=True):
                await self._blobs.put(row.blob_key, f.data)
            async with self._db.transaction() as s:
                for row in rows:
                    await attachments.add(s, row)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._forget([row.blob_key for row in rows])
            raise
        return rows

    async def drop(self, rows: list[Attachment]) -> None:
        """Files kept for an answer this worker no longer holds (its append was fenced)."""
        async with self._db.transaction() as s:
            for row in rows:
                await attachments.remove(s, row)
        await self._forget([row.blob_key for row in rows])

    def _row(self, run: Run, f: ToolFile) -> Attachment:
        assert run.chat_id is not None
        attachment_id = new_id(ID_PREFIX)
        name = file_name(f.name)
        media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Attachment(
            id=attachment_id,
            user_id=run.user_id,
            chat_id=run.chat_id,
            message_id=run.assistant_message_id,
            name=name,
            media_type=media_type,
            size=len(f.data),
            blob_key=blob_key(run.user_id, run.chat_id, attachment_id),
            text=self._text(media_type, f.data),
            created_at=utcnow(),
        )

    def _text(self, media_type: str, data: bytes) -> str:
        if not (media_type.startswith("text/") or media_type in TEXT_TYPES):
            return ""
        try:
            return data.decode()[: self._settings.max_chars]
        except UnicodeDecodeError:
            return ""

    async def _forget(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await self._blobs.delete(key)
            except Exception:  # left under the user's prefix: deleted with the account
                log.exception("could not delete the answer file %s", key)
