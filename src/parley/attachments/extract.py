"""A file's kind told by its content, never by its name, and its text.

A PDF starts with ``%PDF-`` (its text read by pypdf); anything else is text only if it is
valid UTF-8 with no NUL byte. The name's extension only refines text into Markdown or a
language's source for display: it never admits bytes the content does not.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from parley.attachments.settings import AttachmentSettings
from parley.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType

log = logging.getLogger(__name__)

PDF = "application/pdf"
TEXT = "text/plain"
PDF_MAGIC = b"%PDF-"
MAX_NAME_CHARS = 255

_BY_EXTENSION = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".py": "text/x-python",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".ts": "text/x-typescript",
    ".json": "application/json",
    ".html": "text/html",
    ".css": "text/css",
    ".c": "text/x-c",
    ".h": "text/x-c",
    ".cpp": "text/x-c++",
    ".java": "text/x-java",
    ".go": "text/x-go",
    ".rs": "text/x-rust",
    ".rb": "text/x-ruby",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".csv": "text/csv",
    ".xml": "application/xml",
}
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f]+")


class EmptyFile(InvalidRequest):
    code = "empty_file"


class FileTooLarge(PayloadTooLarge):
    code = "file_too_large"


class FileTextTooLong(PayloadTooLarge):
    code = "file_text_too_long"


class UnsupportedFile(UnsupportedMediaType):
    code = "unsupported_file_type"


class EncryptedPdf(UnsupportedMediaType):
    code = "encrypted_pdf"


class UnreadablePdf(InvalidRequest):
    code = "unreadable_pdf"


class PdfWithoutText(InvalidRequest):
    code = "pdf_without_text"


class TooManyPages(PayloadTooLarge):
    code = "too_many_pages"


@dataclass(frozen=True, slots=True)
class Extracted:
    name: str
    media_type: str
    text: str


def file_name(raw: str) -> str:
    """The name shown and given to the model: the last path part, no control characters."""
    name = _UNSAFE_NAME.sub("", raw.replace("\\", "/").rsplit("/", 1)[-1]).strip()
    return name[:MAX_NAME_CHARS] or "file"


def extract(data: bytes, name: str, limits: AttachmentSettings) -> Extracted:
    """The file's kind and text, or the error that says why it cannot be attached. CPU
    bound and untrusted (a PDF is parsed): run it in the parsing pool (``parley.parsing``)."""
    if not data:
        raise EmptyFile("the file is empty", param="body")
    if len(data) > limits.max_bytes:
        raise FileTooLarge(f"a file may be at most {limits.max_bytes} bytes", param="body")
    if data.startswith(PDF_MAGIC):
        media_type, text = PDF, pdf_text(data, max_pages=limits.max_pdf_pages)
    else:
        media_type, text = _text_kind(name), plain_text(data)
    if len(text) > limits.max_chars:
        raise FileTextTooLong(
            f"the file's text is {len(text)} characters; at most {limits.max_chars} are read",
            param="body",
        )
    return Extracted(name, media_type, text)


def plain_text(data: bytes) -> str:
    """UTF-8 text without NUL bytes (a BOM dropped, line ends as ``\\n``), else refused."""
    refused = UnsupportedFile(
        "only text (UTF-8), Markdown, source code and PDF files can be attached", param="body"
    )
    if b"\x00" in data:
        raise refused
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise refused from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise EmptyFile("the file holds no text", param="body")
    return text


def pdf_text(data: bytes, *, max_pages: int) -> str:
    """The text of a PDF's pages, or why there is none to read (more than ``max_pages``
    pages: refused before any page is read)."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opens_without_password(reader):
            raise EncryptedPdf(
                "the PDF is encrypted (password protected): attach an unprotected copy",
                param="body",
            )
        if len(reader.pages) > max_pages:
            raise TooManyPages(
                f"the PDF has {len(reader.pages)} pages; at most {max_pages} are read",
                param="body",
            )
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        log.info("an attached PDF could not be read: %r", e)
        raise UnreadablePdf(
            "the PDF could not be read (damaged or not a PDF)", param="body"
        ) from None
    text = "\n\n".join(p.strip() for p in pages if p.strip()).replace("\x00", "")
    if not text.strip():
        raise PdfWithoutText(
            "the PDF has no text to read (scanned pages are images): attach a text version",
            param="body",
        )
    return text


def _opens_without_password(reader: PdfReader) -> bool:
    """An encrypted PDF that opens with the empty password (restrictions only) is read."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # (an unsupported cipher, a missing crypto library)
        return False


def _text_kind(name: str) -> str:
    return _BY_EXTENSION.get(PurePosixPath(name).suffix.lower(), TEXT)
