"""Keyset pagination: opaque cursors and pages of results (never OFFSET)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from parley.errors import InvalidRequest

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(*key: Any) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *types: type) -> tuple[Any, ...]:
    """Decode a cursor whose key has the given element types, or raise InvalidRequest."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        key = None
    if (
        not isinstance(key, list)
        or len(key) != len(types)
        or not all(type(v) is t for v, t in zip(key, types, strict=True))
    ):
        raise invalid_cursor()
    return tuple(key)


def invalid_cursor() -> InvalidRequest:
    return InvalidRequest(
        "cursor is not valid: pass next_cursor from a previous page unchanged",
        code="invalid_cursor",
        param="cursor",
    )


def page_of(rows: list[T], limit: int, key: Any) -> Page[T]:
    """Rows fetched with LIMIT limit+1 → one page, with a cursor if more remain."""
    if len(rows) <= limit:
        return Page(rows, None)
    rows = rows[:limit]
    return Page(rows, encode_cursor(*key(rows[-1])))
