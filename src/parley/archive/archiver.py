"""Moving idle chats to the blob store and back.

A chat moves in three steps, in this order: (1) its messages and runs are written as one
compressed object under a key of its own; (2) the object is read back and compared; (3) in
ONE transaction the chat row is pointed at the object and its rows are deleted — only if the
chat is still as step 1 read it. A crash before (3) leaves the chat whole in the database
(and perhaps an object that the next pass overwrites); (3) is atomic. So a chat is in the
database, or archived with a pointer to a verified object, never neither.

Coming back (a new message to an archived chat) runs the other way: read the object, put
the rows back and clear the pointer in one transaction, then delete the object (a crash
before that leaves an unreferenced object, overwritten when the chat is archived again and
deleted with its user's data).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from parley.archive.codec import ArchivedChat, CorruptArchive, decode, encode
from parley.blobs.interface import BlobNotFound, BlobStore, BlobStoreError
from parley.blobs.settings import ArchiveSettings, BlobSettings
from parley.blobs.store import build_blob_store
from parley.crashpoints import crash_point
from parley.domain import utcnow
from parley.errors import DependencyUnavailable
from parley.store import archives
from parley.store.database import Database
from parley.store.schema import Chat

log = logging.getLogger(__name__)


def chat_key(user_id: str, chat_id: str) -> str:
    return f"{user_prefix(user_id)}chats/{chat_id}.json.gz"


def user_prefix(user_id: str) -> str:
    """Every object of one user's lives under this prefix (deleted with the account)."""
    return f"users/{user_id}/"


@dataclass(slots=True)
class Report:
    """One pass: chats moved, skipped (they moved on meanwhile), failed, bytes written."""

    archived: int = 0
    skipped: int = 0
    failed: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


class ArchiveUnavailable(DependencyUnavailable):
    """An archived chat's object cannot be read now."""

    code = "archive_unavailable"


class Archiver:
    def __init__(self, db: Database, blobs: BlobStore, settings: ArchiveSettings) -> None:
        self.db = db
        self.blobs = blobs
        self.settings = settings
        self._cache: OrderedDict[str, ArchivedChat] = OrderedDict()

    @classmethod
    def from_settings(
        cls, db: Database, blobs: BlobSettings, settings: ArchiveSettings, data_dir: Path
    ) -> Archiver:
        """The archive over the configured blob store (builds no connection)."""
        return cls(db, build_blob_store(blobs, data_dir), settings)

    async def archive_due(self, *, idle_for: timedelta | None = None) -> Report:
        """Archive every chat idle longer than ``idle_for`` (default: ``after_days``)."""
        if idle_for is None:
            idle_for = timedelta(days=self.settings.after_days)
        idle_since = utcnow() - idle_for
        report = Report()
        after: tuple[datetime, str] | None = None
        while True:
            async with self.db.transaction() as s:
                due = await archives.due_chats(
                    s, idle_since=idle_since, limit=self.settings.batch, after=after
                )
            for chat in due:
                await self._archive_one(chat, report)
            if len(due) < self.settings.batch:
                return report
            after = (due[-1].last_activity_at, due[-1].id)

    async def _archive_one(self, chat: Chat, report: Report) -> None:
        try:
            moved = await self.archive_chat(chat)
        except (BlobStoreError, CorruptArchive) as e:
            report.failed += 1
            report.errors.append(f"{chat.id}: {e}")
            log.warning("archive of chat %s failed: %s", chat.id, e)
            return
        if moved is None:
            report.skipped += 1
        else:
            report.archived += 1
            report.bytes += moved

    async def archive_chat(self, chat: Chat) -> int | None:
        """Move one chat; its object's size, or None if it moved on meanwhile."""
        async with self.db.transaction() as s:
            snapshot, messages, runs = await archives.chat_rows(s, chat)
        data = encode(chat, messages, runs)
        key = chat_key(chat.user_id, chat.id)
        await self.write(key, data)
        crash_point("archive.written")
        await self.verify(key, data)
        async with self.db.transaction() as s:
            marked = await archives.mark_archived(s, snapshot, key=key, size=len(data))
        crash_point("archive.marked")
        return len(data) if marked else None

    async def write(self, key: str, data: bytes) -> None:
        await self.blobs.put(key, data)

    async def verify(self, key: str, data: bytes) -> None:
        if await self.blobs.get(key) != data:
            raise CorruptArchive(f"{key} read back differs from what was written")

    async def read(self, chat: Chat) -> ArchivedChat:
        """An archived chat's rows (kept decoded for the next read)."""
        assert chat.archive_key is not None
        cached = self._cache.get(chat.archive_key)
        if cached is not None:
            self._cache.move_to_end(chat.archive_key)
            return cached
        rows = await self._load(chat)
        self._remember(chat.archive_key, rows)
        return rows

    async def _load(self, chat: Chat) -> ArchivedChat:
        assert chat.archive_key is not None
        try:
            data = await self.blobs.get(chat.archive_key)
            return decode(data, chat_id=chat.id, user_id=chat.user_id)
        except (BlobNotFound, BlobStoreError, CorruptArchive) as e:
            log.error("archived chat %s cannot be read: %s", chat.id, e)
            raise ArchiveUnavailable(
                "this chat is archived and cannot be read now", retry_after=5
            ) from e

    async def restore(self, chat: Chat) -> bool:
        """Bring an archived chat back into the database (False: it was not archived, or
        another process brought it back first)."""
        if chat.archived_at is None or chat.archive_key is None:
            return False
        rows = await self._load(chat)  # fresh rows to insert, never the cached ones
        async with self.db.transaction() as s:
            restored = await archives.mark_restored(s, chat, rows.messages, rows.runs)
        self._cache.pop(chat.archive_key, None)
        if restored:
            await self._forget(chat.archive_key)
        return restored

    async def delete_user_objects(self, user_id: str) -> int:
        """Every object of the user's (archived chats, exports)."""
        self._cache.clear()
        return await self.blobs.delete_prefix(user_prefix(user_id))

    async def forget(self, key: str) -> None:
        """Delete a deleted chat's object (a failure leaves it under its user's prefix)."""
        self._cache.pop(key, None)
        await self._forget(key)

    async def _forget(self, key: str) -> None:
        try:
            await self.blobs.delete(key)
        except BlobStoreError as e:  # an unreferenced object: overwritten or deleted later
            log.warning("restored chat's object %s left behind: %s", key, e)

    def _remember(self, key: str, rows: ArchivedChat) -> None:
        if self.settings.read_cache_chats == 0:
            return
        self._cache[key] = rows
        while len(self._cache) > self.settings.read_cache_chats:
            self._cache.popitem(last=False)
