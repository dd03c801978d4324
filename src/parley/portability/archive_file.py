"""A user's export as one zip: ``parley-export.json`` (every chat with every message and
run's metadata) and ``markdown/<date>-<title>-<id>.md`` per chat, read chat by chat from the
database and, for an archived chat, from its archive."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO

from parley.archive.archiver import Archiver
from parley.domain import utcnow
from parley.portability.document import EXPORT_FILE_NAME, ChatDocument, chat_document, export_json
from parley.portability.markdown import chat_markdown, markdown_name
from parley.store import feedback, users
from parley.store.database import Database
from parley.store.exports import export_rows

_SPOOL_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class Written:
    chats: int = 0
    messages: int = 0


async def write_export(db: Database, archiver: Archiver, user_id: str, out: IO[bytes]) -> Written:
    """Write the user's export zip to ``out``. The JSON is spooled aside while the Markdown
    files go into the zip (a zip writes one member at a time), then added last."""
    written = Written()
    async with db.transaction() as s:
        user = await users.get_user(s, user_id)
    if user is None:
        raise LookupError(f"no user {user_id}")
    with (
        tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as document,
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf,
    ):
        chats = _chats(db, archiver, user_id, zf, written)
        async for piece in export_json(user, chats, exported_at=utcnow()):
            document.write(piece)
        document.seek(0)
        with zf.open(EXPORT_FILE_NAME, "w", force_zip64=True) as member:
            shutil.copyfileobj(document, member)
    return written


async def _chats(
    db: Database, archiver: Archiver, user_id: str, zf: zipfile.ZipFile, written: Written
) -> AsyncIterator[ChatDocument]:
    async with db.transaction() as s:
        async for chat, messages, runs in export_rows(s, user_id=user_id):
            archived = chat.archived_at is not None
            if archived:
                rows = await archiver.read(chat)
                messages, runs = rows.messages, rows.runs
            rated = await feedback.of_chat(s, user_id=user_id, chat_id=chat.id)
            doc = chat_document(chat, messages, runs, archived=archived, feedback=rated)
            zf.writestr(f"markdown/{markdown_name(doc)}", chat_markdown(doc))
            written.chats += 1
            written.messages += len(doc.messages)
            yield doc
