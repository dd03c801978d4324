"""What the parsing processes run: the functions the fork server imports once
(``pool.PRELOAD``), so that a fresh worker has the parsers loaded. A job is one of these,
sent by reference with its arguments."""

from __future__ import annotations

from parley.attachments.extract import extract
from parley.portability.reader import read_import_file

__all__ = ["extract", "read_import_file"]
