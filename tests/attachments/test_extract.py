"""Telling a file's kind by its content (attachments/extract.py), never by its name."""

from __future__ import annotations

import pytest

from parley.attachments.extract import (
    PDF,
    EmptyFile,
    EncryptedPdf,
    FileTextTooLong,
    FileTooLarge,
    UnsupportedFile,
    extract,
    file_name,
)
from parley.attachments.settings import AttachmentSettings
from tests.attachments.pdfs import pdf_bytes

LIMITS = AttachmentSettings(max_bytes=10_000, max_chars=100)


def test_text_is_refined_by_its_name_but_binary_never_admitted() -> None:
    assert extract(b"# Title\r\n", "a.md", LIMITS).media_type == "text/markdown"
    assert extract(b"\xef\xbb\xbfx = 1\r\n", "a.py", LIMITS).text == "x = 1\n"
    assert extract(b"plain", "noext", LIMITS).media_type == "text/plain"
    with pytest.raises(UnsupportedFile):
        extract(b"\xff\xd8\xff\xe0 jpeg", "photo.md", LIMITS)
    with pytest.raises(UnsupportedFile):
        extract(b"text\x00more", "a.txt", LIMITS)


def test_a_pdf_is_told_by_its_magic_whatever_its_name() -> None:
    found = extract(pdf_bytes([["Hello there"]]), "notes.txt", LIMITS)
    assert (found.media_type, found.text) == (PDF, "Hello there")
    with pytest.raises(EncryptedPdf):
        extract(pdf_bytes([["x"]], password="pw"), "a.pdf", LIMITS)


def test_limits() -> None:
    with pytest.raises(EmptyFile):
        extract(b"", "a.txt", LIMITS)
    with pytest.raises(FileTooLarge):
        extract(b"a" * 10_001, "a.txt", LIMITS)
    with pytest.raises(FileTextTooLong):
        extract(b"a" * 101, "a.txt", LIMITS)


def test_names_lose_their_paths_and_control_characters() -> None:
    assert file_name("C:\\Users\\x\\report.pdf") == "report.pdf"
    assert file_name("../../etc/pass\x00wd\n") == "passwd"
    assert file_name("") == "file"
