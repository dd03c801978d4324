"""An import's chats written as the user's own (``portability`` read them).

Every chat and message gets a new id (an imported id could be another user's, or this
user's chat imported twice); the original times are kept: a chat's ``created_at`` and
``updated_at``, each message's ``created_at``, and the chat's ``last_activity_at`` is its
newest message's time (so imported chats sort among the others by when they happened).
Messages take ``seq`` 1, 2, ... in the order read; ``message_count`` is their number.
An imported chat is written into the database whatever it was where it came from (an
export's ``archived`` is not applied: the archiver moves idle chats out on its own).

Runs are not made: only messages are imported, each answer with the model that wrote it (on
the message). A run row is a generation's record in this service (its budget reservation,
its queue and lease, its usage); an imported answer was generated elsewhere, or by another
parley, and the export document keeps those runs' metadata for whoever wants it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import new_id
from parley.portability.document import ImportBatch, ImportedChat, ImportedMessage
from parley.store.chats import new_message_id
from parley.store.parts import MessageParts
from parley.store.schema import Chat, Feedback, Message


@dataclass(frozen=True, slots=True)
class ImportResult:
    chat_ids: tuple[str, ...]  # the new chats, in the order of the import
    messages: int
    # chats of the file that were imported before (or are the user's own, exported): the
    # chats that hold them, in the order of the import
    skipped_chat_ids: tuple[str, ...] = ()

    @property
    def chats(self) -> int:
        return len(self.chat_ids)


# keys looked up per query (a query's parameters stay far below every backend's limit)
_KEYS_PER_QUERY = 500


async def import_chats(s: AsyncSession, *, user_id: str, batch: ImportBatch) -> ImportResult:
    """The batch's chats as the user's, in the caller's transaction (all or nothing); a
    chat imported before (same source and id, or the user's own chat from their export)
    is skipped, and so is one found twice in the batch."""
    keys = [import_key(batch.source, chat) for chat in batch.chats]
    held = await _held(s, user_id, batch, keys)
    chat_ids: list[str] = []
    skipped: list[str] = []
    chat_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    ratings: list[dict[str, Any]] = []
    for imported, key in zip(batch.chats, keys, strict=True):
        if key in held:
            skipped.append(held[key])
            continue
        chat, messages = _rows(user_id, imported, key)
        held[key] = chat["id"]
        chat_ids.append(chat["id"])
        chat_rows.append(chat)
        message_rows += messages
        ratings += _ratings(imported, messages)
    # ORM bulk inserts (one statement a table, executemany): no unit of work per row
    if chat_rows:
        await s.execute(insert(Chat), chat_rows)
    if message_rows:
        await s.execute(insert(Message), message_rows)
    if ratings:
        await s.execute(insert(Feedback), ratings)
    return ImportResult(
        chat_ids=tuple(chat_ids), messages=len(message_rows), skipped_chat_ids=tuple(skipped)
    )


def import_key(source: str, chat: ImportedChat) -> str:
    """``<source>:<the chat's id there>``, or a hash of its content when it has none."""
    if chat.source_id:
        return f"{source}:{chat.source_id}"[:300]
    content = hashlib.sha256()
    for part in (chat.title, chat.created_at.isoformat()):
        content.update(part.encode() + b"\0")
    for m in chat.messages:
        content.update(f"{m.role}\0{m.created_at.isoformat()}\0{m.content}\0".encode())
    return f"{source}:sha256:{content.hexdigest()}"


async def _held(
    s: AsyncSession, user_id: str, batch: ImportBatch, keys: list[str]
) -> dict[str, str]:
    """Of ``keys``, those the user's chats already hold: key → chat id. A parley export's
    chat is held too by the chat whose id it is (the user's own, exported and sent back)."""
    held: dict[str, str] = {}
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[i : i + _KEYS_PER_QUERY]
        rows = await s.execute(
            select(Chat.import_key, Chat.id).where(
                Chat.user_id == user_id, Chat.import_key.in_(chunk)
            )
        )
        held.update({key: chat_id for key, chat_id in rows if key is not None})
    if batch.source == "parley":
        own = {c.source_id: k for c, k in zip(batch.chats, keys, strict=True) if c.source_id}
        ids = list(own)
        for i in range(0, len(ids), _KEYS_PER_QUERY):
            found = await s.scalars(
                select(Chat.id).where(
                    Chat.user_id == user_id, Chat.id.in_(ids[i : i + _KEYS_PER_QUERY])
                )
            )
            held.update({own[chat_id]: chat_id for chat_id in found})
    return held


def _rows(
    user_id: str, imported: ImportedChat, key: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The chat's row and its messages' rows, with new ids."""
    chat_id = new_id("chat")
    times = [m.created_at for m in imported.messages]
    ids = [new_message_id() for _ in imported.messages]
    parents = _parents(imported, ids)
    new_ids = {m.source_id: i for m, i in zip(imported.messages, ids, strict=True) if m.source_id}
    leaf = new_ids.get(imported.active_source_id or "") or (ids[-1] if ids else None)
    chat = {
        "id": chat_id,
        "user_id": user_id,
        "title": imported.title,
        "message_count": len(imported.messages),
        "created_at": imported.created_at,
        "updated_at": imported.updated_at,
        "last_activity_at": max(times, default=imported.created_at),
        "active_leaf_id": leaf,
        "import_key": key,
        "pinned_at": imported.updated_at if imported.pinned else None,
        "shelved_at": imported.updated_at if imported.shelved else None,
        "instructions": imported.instructions,
    }
    messages = [
        _message_row(m, user_id, chat_id, seq, message_id, parent)
        for seq, (m, message_id, parent) in enumerate(
            zip(imported.messages, ids, parents, strict=True), start=1
        )
    ]
    return chat, messages


def _ratings(imported: ImportedChat, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The feedback rows of a chat's rated answers (``rows``: its messages' new rows)."""
    return [
        {
            "message_id": row["id"],
            "user_id": row["user_id"],
            "chat_id": row["chat_id"],
            "rating": m.feedback[0],
            "note": m.feedback[1],
            "model": m.model,
            "created_at": m.created_at,
            "updated_at": m.created_at,
        }
        for m, row in zip(imported.messages, rows, strict=True)
        if m.feedback is not None
    ]


def _message_row(
    m: ImportedMessage, user_id: str, chat_id: str, seq: int, message_id: str, parent: str | None
) -> dict[str, Any]:
    return {
        "id": message_id,
        "user_id": user_id,
        "chat_id": chat_id,
        "seq": seq,
        "role": m.role,
        "content": m.content,
        "parts": MessageParts.from_wire(m.parts).to_json(),
        "status": m.status,
        "model": m.model,
        "created_at": m.created_at,
        "updated_at": m.created_at,
        "parent_id": parent,
    }


def _parents(imported: ImportedChat, ids: list[str]) -> list[str | None]:
    """Each message's parent among the new ids: the export's tree, else one branch."""
    if not imported.tree:
        return [None, *ids[:-1]]
    new_ids = {m.source_id: i for m, i in zip(imported.messages, ids, strict=True) if m.source_id}
    return [new_ids.get(m.parent_source_id or "") for m in imported.messages]
