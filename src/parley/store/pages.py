"""Keyset pagination: signed opaque cursors and pages of results (never OFFSET).

A cursor is a page's last key as JSON (base64url), a ``.``, and an HMAC-SHA256 of the key
and of the listing it pages (``kind``) under the server's secret key (base64url, 128 bits).
``Cursors.open`` hands back only keys this server signed for that listing, so a client can
never make a query run with a key the server did not issue; each listing's decoder (in its
store module) still checks the key's types and ranges.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from parley.errors import InvalidRequest

T = TypeVar("T")

_MAC_BYTES = 16
_DOMAIN = b"parley keyset cursor v1"


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


class Cursors:
    """Seals a listing's keys into cursors, and opens only the cursors it sealed."""

    def __init__(self, secret_key: str) -> None:
        self._key = hmac.new(secret_key.encode(), _DOMAIN, hashlib.sha256).digest()

    def seal(self, kind: str, key: Sequence[Any]) -> str:
        payload = _b64(json.dumps(list(key), separators=(",", ":")).encode())
        return f"{payload}.{self._mac(kind, payload)}"

    def open(self, kind: str, cursor: str) -> list[Any]:
        """The key sealed in ``cursor`` for ``kind``, or InvalidRequest (400)."""
        payload, dot, mac = cursor.rpartition(".")
        if not (dot and cursor.isascii()) or not hmac.compare_digest(mac, self._mac(kind, payload)):
            raise invalid_cursor()
        try:
            key = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise invalid_cursor() from None
        if not isinstance(key, list):
            raise invalid_cursor()
        return key

    def _mac(self, kind: str, payload: str) -> str:
        message = kind.encode("utf-8", "surrogatepass") + b"\n" + payload.encode()
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES])


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def invalid_cursor() -> InvalidRequest:
    return InvalidRequest(
        "cursor is not valid: pass next_cursor from a previous page unchanged",
        code="invalid_cursor",
        param="cursor",
    )


def page_of(rows: list[T], limit: int, cursor_after: Callable[[T], str]) -> Page[T]:
    """Rows fetched with LIMIT limit+1 → one page, with a cursor if more remain."""
    if len(rows) <= limit:
        return Page(rows, None)
    rows = rows[:limit]
    return Page(rows, cursor_after(rows[-1]))
