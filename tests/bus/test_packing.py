"""The Redis bus's connections pack commands in C (``bus/redis/packing.py``): the bytes sent
are the very bytes redis-py's own packer makes, and what it refuses is refused the same way;
the bus suite (``test_bus.py`` and the rest, on a real Redis) runs over these connections."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from parley.bus.redis.packing import packed_in_c

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("CLIENT UNBLOCK", 12),
    (b"CLIENT UNBLOCK", 12),
    ("EVALSHA", "ab" * 20, 2, "ns:run:{r1}:events", "ns:run:{r1}:fence", 10_000, "delta"),
    ("SET", "k", "Привет 東京 \u200b 🙂", -7, 0.1 + 0.2, 1e300, b"\x00\xff raw"),
    ("XREAD", "COUNT", 512, "BLOCK", 2000, "STREAMS", *[f"k{i}" for i in range(3000)], "0-0"),
    ("SET", "big", "x" * 100_000),
]


def connections() -> tuple[aioredis.Connection, aioredis.Connection]:
    plain = aioredis.ConnectionPool.from_url("redis://127.0.0.1:6379")
    packed = packed_in_c(aioredis.ConnectionPool.from_url("redis://127.0.0.1:6379"))
    return plain.make_connection(), packed.make_connection()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_a_command_is_packed_to_the_same_bytes(command: tuple[Any, ...]) -> None:
    theirs, ours = connections()
    assert type(ours).__name__.startswith("PackedInC")
    assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command))


def test_a_pipeline_is_packed_to_the_same_bytes() -> None:
    theirs, ours = connections()
    commands = COMMANDS[3:5] * 50
    assert b"".join(ours.pack_commands(commands)) == b"".join(theirs.pack_commands(commands))


@pytest.mark.parametrize("bad", [None, True, {"a": 1}, [1]])
def test_what_redis_py_refuses_is_refused(bad: Any) -> None:
    theirs, ours = connections()
    with pytest.raises(DataError):
        theirs.pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        ours.pack_command("SET", "k", bad)
