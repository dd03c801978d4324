"""Commands packed into Redis's protocol by hiredis, in C.

redis-py's asyncio connections pack every command in Python, joining the growing buffer
once per argument (its sync connections use hiredis when it is installed; its asyncio ones
do not). The bus's hot commands are long: a batch of appends is one script call of up to
512 appends of 7 arguments, and the stream tail's ``XREAD`` names every stream a process relays
(2,000 arguments at 1,000 streams). Packed in Python they cost the worker and the api a
visible share of their CPU per token (``docs/SERVICE_PROFILE.md``); hiredis (already the
reply parser) packs them in one call. The bytes are the same: hiredis encodes str as UTF-8,
int and float by their ``repr``, as redis-py's encoder does, and refuses what it refuses.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import DataError


class _PackedInC:
    """Mixed into a pool's connection class: ``pack_command`` by hiredis (a pipeline's
    ``pack_commands`` calls it per command)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if isinstance(name, str):  # 'CLIENT UNBLOCK': one argument per word, as redis-py
            args = (*name.encode().split(), *args[1:])
        elif b" " in name:
            args = (*name.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as e:  # (None, a bool, a dict …: refused as redis-py refuses them)
            raise DataError(str(e)) from e


def packed_in_c(pool: aioredis.ConnectionPool) -> aioredis.ConnectionPool:
    """``pool``, its connections (whatever class its URL chose) packing commands in C."""
    base = pool.connection_class
    pool.connection_class = type(f"PackedInC{base.__name__}", (_PackedInC, base), {})
    return pool
