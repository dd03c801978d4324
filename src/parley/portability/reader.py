"""An uploaded import, told apart by its content (never by its file name) and read.

* a zip archive: ChatGPT's whole export (its ``conversations.json``, or the split
  ``conversations-000.json``, ``conversations-001.json``...) or parley's export archive
  (its ``parley-export.json``); looked for in any folder of the archive;
* a JSON array: ChatGPT's ``conversations.json`` or one of its split files;
* a JSON object whose ``format`` is ``"parley.export"``: parley's own export (a single
  ChatGPT conversation, an object with a ``mapping``, is read too).

Anything else is ``ValidationFailed`` ``unsupported_import`` (saying what was expected);
malformed JSON, a broken zip or a document that does not fit its format is
``invalid_import`` naming the file and the problem; more than the limits allow (chats,
messages, bytes unpacked from a zip) is ``import_too_large``. Several files (the split
set uploaded as files) are one import: ``read_import_files``. A conversation found twice
(``conversations.json`` beside its split files) is read once.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any

from pydantic import ValidationError

from parley.errors import ValidationFailed, quoted
from parley.portability import chatgpt
from parley.portability.document import (
    EXPORT_FILE_NAME,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ExportDocument,
    ImportBatch,
    ImportedChat,
    ImportSource,
    imported_chat,
)

EXPECTED = (
    "expected parley's export (its JSON document, format 'parley.export', or its zip) or "
    "ChatGPT's export (conversations.json, a conversations-NNN.json file, or the export's zip)"
)
_SPLIT = re.compile(r"conversations(?:-(\d+))?\.json")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class ImportLimits:
    max_chats: int = 10_000
    max_messages: int = 500_000
    max_unpacked_bytes: int = 256 << 20  # all a zip's members read, uncompressed
    max_message_chars: int = 200_000


DEFAULT_LIMITS = ImportLimits()


def unsupported(what: str) -> ValidationFailed:
    return ValidationFailed(f"{what}: {EXPECTED}", code="unsupported_import", param="file")


def invalid(where: str, problem: str) -> ValidationFailed:
    return ValidationFailed(f"{where}: {problem}", code="invalid_import", param="file")


def too_large(what: str) -> ValidationFailed:
    return ValidationFailed(what, code="import_too_large", param="file")


def read_import(name: str, data: bytes, *, limits: ImportLimits = DEFAULT_LIMITS) -> ImportBatch:
    """One uploaded file (``name`` only names it in errors) as an import."""
    return read_import_files([(name, data)], limits=limits)


def read_import_files(
    files: Iterable[tuple[str, bytes]], *, limits: ImportLimits = DEFAULT_LIMITS
) -> ImportBatch:
    """Uploaded files, each read as ``read_import`` reads one, as one import of one source."""
    documents = (d for name, data in files for d in _documents(name, data, limits))
    return _batch(documents, limits)


def _batch(documents: Iterable[tuple[str, object]], limits: ImportLimits) -> ImportBatch:
    """The chats of ``documents`` (where each was found, its JSON value) as one import."""
    reading = _Reading(limits)
    for where, value in documents:
        reading.add(where, value)
    if reading.source is None:
        raise unsupported("nothing to import")
    return ImportBatch(source=reading.source, chats=tuple(reading.chats))


class _Reading:
    """The chats read so far, of one source, within the limits."""

    def __init__(self, limits: ImportLimits) -> None:
        self.limits = limits
        self.source: ImportSource | None = None
        self.chats: list[ImportedChat] = []
        self.messages = 0
        self.seen: set[str] = set()

    def add(self, where: str, value: object) -> None:
        source, chats = _chats_of(where, value)
        if self.source is not None and source != self.source:
            raise unsupported(f"{where}: one import is parley's export or ChatGPT's, not both")
        self.source = source
        for chat in chats:
            if chat.source_id is not None and source == "chatgpt":
                if chat.source_id in self.seen:
                    continue
                self.seen.add(chat.source_id)
            self._check_messages(where, chat)
            self.chats.append(chat)
            self.messages += len(chat.messages)
        if len(self.chats) > self.limits.max_chats:
            raise too_large(f"more than {self.limits.max_chats} chats in one import")
        if self.messages > self.limits.max_messages:
            raise too_large(f"more than {self.limits.max_messages} messages in one import")

    def _check_messages(self, where: str, chat: ImportedChat) -> None:
        most = self.limits.max_message_chars
        for message in chat.messages:
            if len(message.content) > most:
                raise too_large(
                    f"{where}: chat {quoted(chat.title)} holds a message of "
                    f"{len(message.content)} characters; at most {most} are imported"
                )


def _chats_of(where: str, value: object) -> tuple[ImportSource, list[ImportedChat]]:
    if isinstance(value, list):
        return "chatgpt", _chatgpt(where, value)
    if isinstance(value, Mapping) and value.get("format") == EXPORT_FORMAT:
        return "parley", [imported_chat(c) for c in parley_document(where, value).chats]
    if chatgpt.is_conversation(value):
        return "chatgpt", _chatgpt(where, [value])
    raise unsupported(where)


def _chatgpt(where: str, value: list[Any]) -> list[ImportedChat]:
    try:
        return chatgpt.read_conversations(value)
    except chatgpt.Malformed as e:
        raise invalid(where, str(e)) from None


def parley_document(where: str, value: Mapping[str, Any]) -> ExportDocument:
    """parley's export document, of a version this parley reads."""
    version = value.get("version")
    if version != EXPORT_VERSION:
        raise ValidationFailed(
            f"{where}: parley export version {quoted(str(version))}; "
            f"this parley reads version {EXPORT_VERSION}",
            code="unsupported_import",
            param="file",
        )
    try:
        return ExportDocument.model_validate(value)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:3]
        ]
        more = f" (and {e.error_count() - 3} more)" if e.error_count() > 3 else ""
        raise invalid(where, "; ".join(problems) + more) from None


def read_import_file(path: str, name: str, limits: ImportLimits) -> ImportBatch:
    """An import streamed to a file (``path``), read as ``read_import`` reads its bytes;
    a zip is read from the file, member by member, never whole into memory. Run in the
    parsing pool (``parley.parsing``): untrusted, and CPU and memory bound."""
    with open(path, "rb") as file:
        if zipfile.is_zipfile(file):
            where = quoted(name)
            file.seek(0)
            documents = [(w, parse_json(w, d)) for w, d in _unzipped(where, file, limits)]
        else:
            file.seek(0)
            documents = _documents(name, file.read(), limits)
    return _batch(documents, limits)


def _documents(name: str, data: bytes, limits: ImportLimits) -> list[tuple[str, object]]:
    """The JSON documents of one upload: itself, or the ones its zip holds."""
    where = quoted(name)
    if zipfile.is_zipfile(io.BytesIO(data)):
        return [(w, parse_json(w, d)) for w, d in _unzipped(where, io.BytesIO(data), limits)]
    if data.startswith(b"PK\x03\x04"):
        raise invalid(where, "a zip that cannot be read (cut short?)")
    return [(where, parse_json(where, data))]


def parse_json(where: str, data: bytes) -> object:
    """The JSON value of ``data``: unsupported if it does not even start like a JSON array
    or object, invalid if it does but is not well-formed JSON in UTF-8."""
    data = data.removeprefix(_BOM)
    head = data.lstrip(b" \t\r\n")[:1]
    if head not in (b"[", b"{"):
        raise unsupported(where)
    try:
        return json.loads(data.decode("utf-8"), parse_int=_json_int, parse_constant=_not_json)
    except UnicodeDecodeError as e:
        raise invalid(where, f"not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        at = f"line {e.lineno} column {e.colno}"
        raise invalid(where, f"malformed JSON at {at}: {e.msg}") from None
    except _NumberRefused as e:
        raise invalid(where, str(e)) from None
    except RecursionError:
        raise invalid(where, "JSON nested too deeply") from None


# no number of an export has more digits than this (ids are strings, times seconds)
MAX_INT_DIGITS = 40


class _NumberRefused(ValueError):
    pass


def _json_int(text: str) -> int:
    """A JSON integer, refused past ``MAX_INT_DIGITS`` digits (Python refuses past 4,300,
    and nothing in an export is that long: such a number is an attack on the reader)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberRefused(f"a number of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _not_json(name: str) -> float:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's reader takes them, JSON has none."""
    raise _NumberRefused(f"{name} is not a JSON value")


def _unzipped(where: str, data: IO[bytes], limits: ImportLimits) -> list[tuple[str, bytes]]:
    """The members of the zip an import reads (parley's document, ChatGPT's conversation
    files in order), each read within what is left of ``max_unpacked_bytes``."""
    try:
        with zipfile.ZipFile(data) as archive:
            members = _wanted(archive.infolist())
            if not members:
                raise unsupported(f"{where} (a zip without {EXPORT_FILE_NAME} or conversations)")
            left = limits.max_unpacked_bytes
            read: list[tuple[str, bytes]] = []
            for info in members:
                with archive.open(info) as member:
                    content = member.read(left + 1)
                left -= len(content)
                if left < 0:
                    most = limits.max_unpacked_bytes
                    raise too_large(f"{where} unpacks to more than {most} bytes")
                read.append((f"{where}: {quoted(info.filename)}", content))
            return read
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
        raise invalid(where, f"a zip that cannot be read ({e})") from None


def _wanted(infos: list[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    """parley's export documents, then ChatGPT's conversations.json and its split files by
    number (macOS resource forks left out)."""
    found: list[tuple[int, str, zipfile.ZipInfo]] = []
    for info in infos:
        path = PurePosixPath(info.filename)
        if info.is_dir() or "__MACOSX" in path.parts or path.name.startswith("._"):
            continue
        split = _SPLIT.fullmatch(path.name)
        if path.name == EXPORT_FILE_NAME:
            found.append((-2, info.filename, info))
        elif split is not None:
            found.append((int(split.group(1)) if split.group(1) else -1, info.filename, info))
    return [info for *_, info in sorted(found, key=lambda f: (f[0], f[1]))]
