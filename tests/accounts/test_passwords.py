"""Passwords are hashed with Argon2id at OWASP's parameters."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import anyio.to_thread
import pytest

from parley.accounts.passwords import HashingBusy, Passwords
from tests.waiting import eventually


async def test_default_hash_is_argon2id_at_owasp_parameters() -> None:
    pw = Passwords()
    h = await pw.hash("correct horse battery")
    assert h.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert (await pw.verify(h, "correct horse battery")).ok
    assert not (await pw.verify(h, "wrong")).ok
    assert not (await pw.verify("not a hash", "x")).ok


async def test_weaker_hashes_are_flagged_for_rehash() -> None:
    weak = await Passwords(time_cost=1, memory_kib=64).hash("pw")
    verdict = await Passwords().verify(weak, "pw")
    assert verdict.ok and verdict.needs_rehash


async def test_hashing_has_threads_of_its_own() -> None:
    """Every thread of the pool other blocking work shares (anyio's, 40) is taken, as 40
    PDF uploads once took them: a password is still hashed and checked."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    release = threading.Event()
    holders = [
        asyncio.create_task(anyio.to_thread.run_sync(release.wait, 30))
        for _ in range(int(limiter.total_tokens))
    ]
    try:
        await eventually(lambda: _true(limiter.borrowed_tokens == limiter.total_tokens), "full")
        pw = Passwords(time_cost=1, memory_kib=64)
        async with asyncio.timeout(10):
            assert (await pw.verify(await pw.hash("pw"), "pw")).ok
    finally:
        release.set()
        await asyncio.gather(*holders)


async def test_a_flood_of_hashes_is_refused_past_its_queue_not_queued_forever() -> None:
    pw = Passwords(time_cost=1, memory_kib=64, threads=1, max_waiting=2)
    slow = threading.Event()
    started = threading.Event()

    def held(_: str) -> str:
        started.set()
        slow.wait(30)
        return "h"

    pw._hasher = SimpleNamespace(hash=held)  # type: ignore[assignment]
    first = asyncio.create_task(pw.hash("a"))
    await asyncio.to_thread(started.wait, 10)
    waiting = [asyncio.create_task(pw.hash("b")) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(HashingBusy) as refused:
        await pw.hash("c")
    assert refused.value.status_code == 503 and refused.value.retry_after == 1
    slow.set()
    assert await asyncio.gather(first, *waiting) == ["h", "h", "h"]
    pw.close()


async def _true(value: bool) -> bool:
    return value
