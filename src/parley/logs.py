"""Log lines, and the context each one carries.

Where stderr is not a terminal (a service manager, a container, a file), each line is one
JSON object: ``time`` (ISO-8601, UTC), ``level``, ``logger``, ``message``, the context fields
known where it was logged (``request_id``, ``trace_id``, ``run_id``, ``user_id``) and, for an
exception, ``exc_info`` (the traceback as text). On a terminal the lines are readable text,
the context fields appended. ``log_format`` (``--log-format``, ``PARLEY_LOG_FORMAT``) forces
either.

The context lives in a ``contextvars`` variable: ``bind(run_id=…)`` holds for the code in
its ``with`` block and every task started there, so a request's or a run's lines all carry
it. Only those four fields ever reach a line: whatever else a caller passes as ``extra`` is
left out, so nothing logged by accident (a message, a password) is written.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import IO, Any

__all__ = [
    "CONTEXT_FIELDS",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "add",
    "bind",
    "bound",
    "configure",
    "hold",
    "trace_id_of",
]

CONTEXT_FIELDS = ("request_id", "trace_id", "run_id", "user_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFormat(StrEnum):
    AUTO = "auto"  # JSON, unless stderr is a terminal
    JSON = "json"
    TEXT = "text"


_EMPTY: Mapping[str, str] = MappingProxyType({})
_context: ContextVar[Mapping[str, str]] = ContextVar("parley_log_context", default=_EMPTY)


@contextmanager
def bind(**fields: str | None) -> Iterator[None]:
    """Within the block (and the tasks it starts), log lines carry ``fields``; a None value
    leaves the field as it was. Only the names in ``CONTEXT_FIELDS`` are accepted."""
    unknown = sorted(set(fields) - set(CONTEXT_FIELDS))
    if unknown:
        raise TypeError(f"not a log context field: {', '.join(unknown)}")
    known = {name: str(value) for name, value in fields.items() if value is not None}
    token = _context.set(MappingProxyType({**_context.get(), **known}))
    try:
        yield
    finally:
        _context.reset(token)


def add(**fields: str | None) -> None:
    """Bind ``fields`` for the rest of the enclosing ``bind`` block (a request's, at the
    edge, which restores what was there before it when it ends): what a request learns on
    its way, such as who made it."""
    unknown = sorted(set(fields) - set(CONTEXT_FIELDS))
    if unknown:
        raise TypeError(f"not a log context field: {', '.join(unknown)}")
    known = {name: str(value) for name, value in fields.items() if value is not None}
    _context.set(MappingProxyType({**_context.get(), **known}))


def bound() -> dict[str, str]:
    """The context fields bound here."""
    return dict(_context.get())


def _fields(record: logging.LogRecord) -> dict[str, str]:
    """The record's context: an allow-listed ``extra`` value, else the bound one."""
    context = _context.get()
    fields: dict[str, str] = {}
    for name in CONTEXT_FIELDS:
        value = record.__dict__.get(name) or context.get(name)
        if value:
            fields[name] = str(value)
    return fields


def _utc(created: float) -> str:
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object a line, ASCII only (so no character a reader takes for a line break)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, then the context fields as ``name=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        context = " ".join(f"{name}={value}" for name, value in _fields(record).items())
        return f"{text} [{context}]" if context else text


def formatter(fmt: LogFormat | str, stream: IO[str]) -> logging.Formatter:
    chosen = LogFormat(fmt)
    if chosen is LogFormat.AUTO:
        chosen = LogFormat.TEXT if _is_terminal(stream) else LogFormat.JSON
    return TextFormatter() if chosen is LogFormat.TEXT else JsonFormatter()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False


class _Held(logging.Handler):
    """Keeps the records logged before the format is known, for ``configure`` to write."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def hold(level: str | int = logging.INFO) -> None:
    """Keep what is logged from now on until ``configure`` writes it in the chosen format
    (the settings, which choose it, log while they load)."""
    root = logging.getLogger()
    root.setLevel(level.upper() if isinstance(level, str) else level)
    if not any(isinstance(handler, _Held) for handler in root.handlers):
        root.addHandler(_Held())


def configure(
    fmt: LogFormat | str = LogFormat.AUTO,
    level: str | int = logging.INFO,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """The root logger writes to ``stream`` (stderr) in ``fmt`` from ``level`` up, in place
    of its handlers; records held since ``hold`` are written first."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter(fmt, out))
    root = logging.getLogger()
    held: list[logging.LogRecord] = []
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, _Held):
            held.extend(old.records)
        old.close()
    root.setLevel(level.upper() if isinstance(level, str) else level)
    root.addHandler(handler)
    for record in held:
        handler.handle(record)
    return handler


_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-[0-9a-f]{2}"
    r"(?P<rest>-.*)?"
)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header (``00-<32 hex>-<16 hex>-<2 hex>``), or
    None when it is missing or malformed (upper-case hex, version ``ff``, an all-zero id,
    anything after the flags of a version-00 header)."""
    if traceparent is None:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip(" \t"))
    if match is None or match["version"] == "ff":
        return None
    if match["version"] == "00" and match["rest"] is not None:
        return None
    if set(match["trace"]) == {"0"} or set(match["span"]) == {"0"}:
        return None
    return match["trace"]
