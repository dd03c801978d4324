"""What the parsing processes run, each returning plain JSON values (the server reads the
reply as JSON, never as a pickle: a parser the file subverted cannot run code in the
server). The fork server imports this module once (``pool.PRELOAD``), so a fresh worker has
the parsers loaded."""

from __future__ import annotations

from typing import Any

from parley.attachments.extract import extract
from parley.attachments.settings import AttachmentSettings
from parley.portability.parts import write_import_parts

__all__ = ["attachment_text", "write_import_parts"]


def attachment_text(data: bytes, name: str, settings: AttachmentSettings) -> dict[str, Any]:
    """An attached file's kind and text (``extract``) as ``{"name", "media_type", "text"}``."""
    found = extract(data, name, settings)
    return {"name": found.name, "media_type": found.media_type, "text": found.text}
