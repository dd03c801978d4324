"""Password hashing with Argon2id at OWASP's recommended parameters.

OWASP Password Storage Cheat Sheet: Argon2id, m=19 MiB (19456 KiB), t=2, p=1.

Hashing runs on threads of its own (``threads``, by default half the cores), never on the
event loop nor on the thread pool other work shares: no upload, import or other blocking call
can make a login wait, and a flood of logins takes at most those threads' cores, never the
whole machine. At most ``max_waiting`` hashes wait for a thread; past that a login is refused
at once (503 ``server_busy`` with Retry-After) rather than queued behind the flood.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from parley.errors import Overloaded

OWASP_TIME_COST = 2
OWASP_MEMORY_KIB = 19_456
OWASP_PARALLELISM = 1
MAX_WAITING = 64

T = TypeVar("T")


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


class HashingBusy(Overloaded):
    code = "server_busy"


@dataclass(frozen=True, slots=True)
class Verification:
    ok: bool
    needs_rehash: bool = False


class Passwords:
    def __init__(
        self,
        *,
        time_cost: int = OWASP_TIME_COST,
        memory_kib: int = OWASP_MEMORY_KIB,
        parallelism: int = OWASP_PARALLELISM,
        threads: int | None = None,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._hasher = PasswordHasher(
            time_cost=time_cost,
            memory_cost=memory_kib,
            parallelism=parallelism,
            type=Type.ID,
        )
        self._dummy_hash: str | None = None
        self._threads = threads or default_threads()
        self._max_waiting = max_waiting
        self._pool: ThreadPoolExecutor | None = None  # made at the first hash
        self._pending = 0

    async def hash(self, password: str) -> str:
        return await self._run(self._hasher.hash, password)

    async def verify(self, password_hash: str, password: str) -> Verification:
        return await self._run(self._verify, password_hash, password)

    async def _run(self, fn: Callable[..., T], *args: str) -> T:
        if self._pending >= self._threads + self._max_waiting:
            raise HashingBusy("too many sign-ins at once: try again shortly", retry_after=1)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="parley-argon2")
        self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._pending -= 1

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    async def burn(self, password: str) -> None:
        """Spend the time a verification takes, so unknown emails are not told apart."""
        if self._dummy_hash is None:
            self._dummy_hash = await self.hash("not a password of anyone")
        await self.verify(self._dummy_hash, password)

    def _verify(self, password_hash: str, password: str) -> Verification:
        try:
            self._hasher.verify(password_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return Verification(ok=False)
        return Verification(ok=True, needs_rehash=self._hasher.check_needs_rehash(password_hash))
