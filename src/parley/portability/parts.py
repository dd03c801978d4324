"""An import's chats as JSON lines, from the parsing process to the server.

The parsing process (``parley.parsing``) reads the uploaded file and writes its chats here,
one JSON object a line; the server reads them back a few at a time (``read_parts``), each
validated again as an ``ImportedChat`` (the parsing process is no more trusted than the
file it read), and writes each part in a transaction of its own: the server never holds a
whole import in memory, and never holds the database's write lock for all of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from parley.portability.document import ImportBatch, ImportedChat, ImportSource
from parley.portability.reader import ImportLimits, read_import_file
from parley.store.database import Database
from parley.store.imports import ImportResult, import_chats

# what one transaction writes, at most (a chat larger than that alone): the write lock is
# let go, and the event loop turns, between parts, so a large import never holds up other
# users' writes or requests for long (SQLite: ~200 messages ~40 ms)
PART_CHATS = 50
PART_MESSAGES = 200

_CHAT: TypeAdapter[ImportedChat] = TypeAdapter(ImportedChat)


def write_import_parts(path: str, name: str, limits: ImportLimits, out: str) -> dict[str, Any]:
    """The import at ``path`` read (``read_import_file``), its chats written to ``out``;
    what it holds: ``{"source", "chats", "messages"}`` (plain JSON, for the server)."""
    batch = read_import_file(path, name, limits)
    with open(out, "wb") as file:
        for chat in batch.chats:
            file.write(_CHAT.dump_json(chat) + b"\n")
    return {"source": batch.source, "chats": len(batch.chats), "messages": batch.message_count}


def read_parts(
    source: ImportSource, path: str, chats: int = PART_CHATS, messages: int = PART_MESSAGES
) -> Iterator[ImportBatch]:
    """The chats ``write_import_parts`` wrote, as batches of at most ``chats`` chats and
    ``messages`` messages (a larger chat is a batch of its own)."""
    part: list[ImportedChat] = []
    held = 0
    with open(path, "rb") as file:
        for line in file:
            chat = _CHAT.validate_json(line)
            if part and (len(part) == chats or held + len(chat.messages) > messages):
                yield ImportBatch(source=source, chats=tuple(part))
                part, held = [], 0
            part.append(chat)
            held += len(chat.messages)
    if part:
        yield ImportBatch(source=source, chats=tuple(part))


class ImportSummary(BaseModel):
    """What the parsing process says it wrote (validated: it is not trusted)."""

    source: Literal["parley", "chatgpt"]
    chats: int
    messages: int


async def import_parts(
    db: Database, user_id: str, summary: ImportSummary, path: str
) -> ImportResult:
    """The chats at ``path`` written as the user's, a part (``read_parts``) a transaction. A part
    that fails leaves the parts before it: sending the file again completes the import
    (the chats made already are skipped)."""
    made: list[str] = []
    skipped: list[str] = []
    messages = 0
    for part in read_parts(summary.source, path):
        async with db.transaction() as s:
            result = await import_chats(s, user_id=user_id, batch=part)
        made += result.chat_ids
        skipped += result.skipped_chat_ids
        messages += result.messages
        await asyncio.sleep(0)  # (SQLite's statements run on the loop: let others in)
    return ImportResult(chat_ids=tuple(made), messages=messages, skipped_chat_ids=tuple(skipped))
