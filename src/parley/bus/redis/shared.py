"""What every part of the Redis bus shares: the client and the limits, key names, scripts,
and small conversions of Redis replies.

Key names: ``<ns>:<scope>:{<tag>}:<suffix>`` (``ns`` is the bus's namespace, ``parley`` by
default). The part in braces is a Redis Cluster hash tag, so the keys one script touches
(one run's, one user's, the queue's) share a slot. Each section module documents its keys.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, cast, overload

import redis.asyncio as aioredis

from parley.bus.interface import BusLimits, EventKind, RunEvent, StreamEntry

MAX_BLOCK_SECONDS = 30.0

_Arg = str | int | float


class _Script(Protocol):
    """What ``register_script`` returns, typed (redis-py leaves ``__call__`` untyped)."""

    def __call__(self, keys: Sequence[str], args: Sequence[_Arg]) -> Awaitable[Any]: ...


class _RedisOps:
    """The base of the bus's sections: the state they share and the key names."""

    limits: BusLimits
    _ns: str
    _redis: aioredis.Redis

    def _key(self, scope: str, tag: str, suffix: str) -> str:
        """``<ns>:<scope>:{<tag>}:<suffix>``; ``<ns>:{<tag>}:<suffix>`` without a scope."""
        tagged = f"{{{tag}}}:{suffix}"
        return f"{self._ns}:{scope}:{tagged}" if scope else f"{self._ns}:{tagged}"

    def _run_key(self, run_id: str, suffix: str) -> str:
        return self._key("run", run_id, suffix)

    def _user_key(self, user_id: str, suffix: str) -> str:
        return self._key("user", user_id, suffix)


class _LuaScript:
    """A Lua script as a class attribute of a section: registered with the bus's client
    the first time a bus uses it (registering only hashes it), then kept on that bus."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> _LuaScript: ...

    @overload
    def __get__(self, instance: _RedisOps, owner: type | None = None) -> _Script: ...

    def __get__(
        self, instance: _RedisOps | None, owner: type | None = None
    ) -> _LuaScript | _Script:
        if instance is None:
            return self
        script = cast(_Script, instance._redis.register_script(self.source))
        instance.__dict__[self.name] = script  # found there from now on, before this
        return script


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up and at least 1 (0 means 'forever' to Redis)."""
    return max(1, math.ceil(seconds * 1000))


def _block_seconds(seconds: float) -> float:
    """A blocking-pop timeout in seconds: never 0 (which would block forever), at most
    MAX_BLOCK_SECONDS (callers wait again; the socket timeout stays above it)."""
    return min(_ms(seconds) / 1000, MAX_BLOCK_SECONDS)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- stream entry ids and XREAD replies (the streams section and the tail) -------------------

_Id = tuple[int, int]  # a stream entry id, ordered as Redis orders them


def _parse_id(value: str) -> _Id | None:
    """``<ms>-<seq>`` as a pair of ints; None for anything else (e.g. ``$``, ``5``)."""
    ms, sep, seq = value.partition("-")
    if not (sep and ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()):
        return None
    parsed = int(ms), int(seq)
    return parsed if max(parsed) < 2**64 else None


def _entry_id(value: str) -> _Id:
    """An id Redis issued (``<ms>-<seq>``, read from a stream: not a client's, which
    ``_parse_id`` checks) as a pair of ints; ValueError for anything else."""
    ms, sep, seq = value.partition("-")
    if not sep:
        raise ValueError(f"not a stream entry id: {value!r}")
    return int(ms), int(seq)


def _id_text(entry_id: _Id) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


def _stream_rows(reply: object) -> list[Any]:
    """The entries of the one stream an XREAD named: ``[[key, entries]]`` or ``{key: entries}``."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(next(iter(reply.values())))
    return list(cast(list[Any], reply)[0][1])


def _streams(reply: object) -> list[tuple[str, list[Any]]]:
    """Every stream of a multi-key XREAD reply: ``[[key, entries], ...]`` or a dict."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(_text(key), list(rows)) for key, rows in reply.items()]
    return [(_text(row[0]), list(row[1])) for row in cast(list[Any], reply)]


_KINDS = {kind.value: kind for kind in EventKind}


def _entry(entry_id: object, fields: object) -> StreamEntry:
    """A stream entry as read; its data stays JSON text until something reads it (a relay
    writes the text out as it is). An entry of an unknown kind raises ValueError."""
    values = cast(dict[str, str], fields)
    kind = _KINDS.get(values["k"])
    if kind is None:
        raise ValueError(f"unknown event kind {values['k']!r}")
    return StreamEntry(_text(entry_id), RunEvent.encoded(kind, values["d"]))
