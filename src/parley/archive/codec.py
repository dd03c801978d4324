"""One archived chat as bytes: its messages and runs, every column, in gzipped JSON.

Rows are written column by column from the tables themselves, so a column added by a later
migration is archived without a change here; reading an older archive leaves a column it
lacks at its default. Datetimes travel as ISO strings with their offset, enums as values.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any, TypeVar

from sqlalchemy import Enum, Table

from parley.engines.sampling import SamplingParams
from parley.store.schema import Base, Chat, Message, Run, SamplingColumn, UTCDateTime

FORMAT = "parley.archive"
VERSION = 1

Row = TypeVar("Row", bound=Base)


class CorruptArchive(Exception):
    """The bytes are not an archive of this chat."""


@dataclass(frozen=True, slots=True)
class ArchivedChat:
    """A chat's rows as they were in the database, oldest message first."""

    chat_id: str
    user_id: str
    messages: list[Message]
    runs: list[Run]


def encode(chat: Chat, messages: list[Message], runs: list[Run]) -> bytes:
    document = {
        "format": FORMAT,
        "version": VERSION,
        "chat_id": chat.id,
        "user_id": chat.user_id,
        "messages": [_columns(m) for m in sorted(messages, key=lambda m: m.seq)],
        "runs": [_columns(r) for r in runs],
    }
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def decode(data: bytes, *, chat_id: str, user_id: str) -> ArchivedChat:
    """The rows (new, detached ORM objects); ``CorruptArchive`` if the bytes are not this
    user's chat's archive."""
    try:
        document = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as e:
        raise CorruptArchive(f"archive of {chat_id} does not decode: {e}") from e
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CorruptArchive(f"archive of {chat_id} is not a parley archive")
    if document.get("chat_id") != chat_id or document.get("user_id") != user_id:
        raise CorruptArchive(f"archive under {chat_id}'s key holds another chat")
    try:
        messages = [_row(Message, raw) for raw in document["messages"]]
        if messages and all("parent_id" not in raw for raw in document["messages"]):
            for before, message in pairwise(messages):
                message.parent_id = before.id  # archived before branches: one branch
        runs = [_row(Run, raw) for raw in document["runs"]]
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptArchive(f"archive of {chat_id} has a malformed row: {e}") from e
    return ArchivedChat(chat_id=chat_id, user_id=user_id, messages=messages, runs=runs)


def _table(model: type[Base]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


def _columns(row: Base) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in _table(type(row)).columns:
        value = getattr(row, column.key)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, SamplingParams):
            value = value.model_dump(exclude_defaults=True)
        elif hasattr(value, "value") and isinstance(column.type, Enum):
            value = value.value
        out[column.key] = value
    return out


def _row(model: type[Row], raw: dict[str, Any]) -> Row:
    values: dict[str, Any] = {}
    if model is Run and "sampling" not in raw:  # archived before runs.sampling (0015)
        raw = {**raw, "sampling": {"temperature": raw.get("temperature")}}
    for column in _table(model).columns:
        if column.key not in raw:
            continue
        value = raw[column.key]
        if value is not None and isinstance(column.type, UTCDateTime):
            value = datetime.fromisoformat(value)
        elif isinstance(column.type, SamplingColumn):
            value = SamplingParams.model_validate(value or {})
        elif value is not None and isinstance(column.type, Enum) and column.type.enum_class:
            value = column.type.enum_class(value)
        values[column.key] = value
    return model(**values)
