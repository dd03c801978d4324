"""Password hashing with Argon2id at OWASP's recommended parameters.

OWASP Password Storage Cheat Sheet: Argon2id, m=19 MiB (19456 KiB), t=2, p=1.
Hashing runs in a worker thread so the event loop never waits on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio.to_thread
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

OWASP_TIME_COST = 2
OWASP_MEMORY_KIB = 19_456
OWASP_PARALLELISM = 1


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
    ) -> None:
        self._hasher = PasswordHasher(
            time_cost=time_cost,
            memory_cost=memory_kib,
            parallelism=parallelism,
            type=Type.ID,
        )
        self._dummy_hash: str | None = None

    async def hash(self, password: str) -> str:
        return await anyio.to_thread.run_sync(self._hasher.hash, password)

    async def verify(self, password_hash: str, password: str) -> Verification:
        return await anyio.to_thread.run_sync(self._verify, password_hash, password)

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
