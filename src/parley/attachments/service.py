"""Attachments: a file uploaded to a chat (checked by content, its bytes in the blob store,
its text in ``attachments``), listed, removed before it is sent. An upload that fails
leaves nothing behind: the object is written first, then the row, and the object is
deleted again if the row cannot be."""

from __future__ import annotations

import logging

import anyio
from pydantic import TypeAdapter
from sqlalchemy.ext.asyncio import AsyncSession

from parley.archive.archiver import user_prefix
from parley.attachments.extract import Extracted, file_name
from parley.attachments.settings import AttachmentSettings
from parley.blobs.interface import BlobStore
from parley.domain import new_id, utcnow
from parley.errors import Conflict
from parley.parsing.jobs import attachment_text
from parley.parsing.pool import ParsePool
from parley.store import attachments, chats
from parley.store.attachments import ID_PREFIX, AttachmentSent
from parley.store.database import Database
from parley.store.schema import Attachment

log = logging.getLogger(__name__)


_EXTRACTED: TypeAdapter[Extracted] = TypeAdapter(Extracted)


class TooManyFiles(Conflict):
    code = "too_many_files"


def blob_key(user_id: str, chat_id: str, attachment_id: str) -> str:
    """Under the user's prefix (deleted with the account), a chat's files side by side."""
    return f"{chat_prefix(user_id, chat_id)}{attachment_id}"


def chat_prefix(user_id: str, chat_id: str) -> str:
    return f"{user_prefix(user_id)}attachments/{chat_id}/"


class Attachments:
    def __init__(
        self, db: Database, blobs: BlobStore, settings: AttachmentSettings, parsing: ParsePool
    ) -> None:
        self._db = db
        self._blobs = blobs
        self._settings = settings
        self._parsing = parsing

    async def admit(self, user_id: str, chat_id: str) -> None:
        """Whether a file may be attached to the chat: another user's chat is a 404, a
        chat with ``max_files`` waiting a 409 (checked before the file is read)."""
        async with self._db.transaction() as s:
            await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
            await self._check_room(s, user_id, chat_id)

    async def upload(self, user_id: str, chat_id: str, filename: str, data: bytes) -> Attachment:
        """The file attached to the chat's next message, or the error that says why not
        (and nothing stored). Its text is read in the parsing pool (``parley.parsing``)."""
        await self.admit(user_id, chat_id)
        name = file_name(filename)
        reply = await self._parsing.run(user_id, attachment_text, data, name, self._settings)
        found = _EXTRACTED.validate_python(reply)
        attachment = _row(user_id, chat_id, found, len(data))
        await self._blobs.put(attachment.blob_key, data)
        try:
            async with self._db.transaction() as s:
                await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
                await self._check_room(s, user_id, chat_id)
                await attachments.add(s, attachment)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._forget_blob(attachment.blob_key)
            raise
        return attachment

    async def list(self, user_id: str, chat_id: str) -> list[Attachment]:
        async with self._db.transaction() as s:
            await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
            return await attachments.of_chat(s, user_id=user_id, chat_id=chat_id)

    async def remove(self, user_id: str, attachment_id: str) -> None:
        """A file taken off the message before it is sent (409 once it was sent)."""
        async with self._db.transaction() as s:
            attachment = await attachments.get(s, user_id=user_id, attachment_id=attachment_id)
            if attachment.message_id is not None:
                raise AttachmentSent(
                    "the file was sent with its message: delete the chat to remove it",
                    param="id",
                )
            await attachments.remove(s, attachment)
        await self._forget_blob(attachment.blob_key)

    async def forget_chat(self, user_id: str, chat_id: str) -> None:
        """A deleted chat's files' objects (its rows go with the chat)."""
        await self._blobs.delete_prefix(chat_prefix(user_id, chat_id))

    async def _check_room(self, s: AsyncSession, user_id: str, chat_id: str) -> None:
        waiting = await attachments.waiting(s, user_id=user_id, chat_id=chat_id)
        if waiting >= self._settings.max_files:
            raise TooManyFiles(
                f"at most {self._settings.max_files} files can be sent with one message",
                param="body",
            )

    async def _forget_blob(self, key: str) -> None:
        try:
            await self._blobs.delete(key)
        except Exception:  # left under the user's prefix: deleted with the account
            log.exception("could not delete the attachment object %s", key)


def _row(user_id: str, chat_id: str, found: Extracted, size: int) -> Attachment:
    attachment_id = new_id(ID_PREFIX)
    return Attachment(
        id=attachment_id,
        user_id=user_id,
        chat_id=chat_id,
        message_id=None,
        name=found.name,
        media_type=found.media_type,
        size=size,
        blob_key=blob_key(user_id, chat_id, attachment_id),
        text=found.text,
        created_at=utcnow(),
    )
