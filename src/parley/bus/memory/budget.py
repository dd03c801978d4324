"""The in-process bus's per-user token budgets (token buckets).

A user's entry is the balance and when it was taken; refill is computed when it is read. A
missing entry is a full bucket: a change that fills it deletes the entry.
"""

from __future__ import annotations

from parley.bus.interface import TokenBalance, TokenBucket, TokenReservation
from parley.bus.memory.shared import _MemoryOps


class _BudgetOps(_MemoryOps):
    def __init__(self) -> None:
        super().__init__()
        self._budgets: dict[str, tuple[float, float]] = {}  # user -> (tokens, as of when)

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        tokens = self._tokens(user_id, bucket)
        if tokens < amount:
            balance = TokenBalance(tokens, bucket)
            return TokenReservation(False, balance, bucket.seconds_until(tokens, amount))
        return TokenReservation(True, self._store_tokens(user_id, tokens - amount, bucket))

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        tokens = min(float(bucket.capacity), self._tokens(user_id, bucket) + reserved - used)
        return self._store_tokens(user_id, tokens, bucket)

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        return TokenBalance(self._tokens(user_id, bucket), bucket)

    def _tokens(self, user_id: str, bucket: TokenBucket) -> float:
        """The balance now: the stored one plus the refill since, up to the capacity."""
        stored = self._budgets.get(user_id)
        if stored is None:
            return float(bucket.capacity)
        tokens, at = stored
        refill = max(0.0, self._clock() - at) * bucket.per_minute / 60
        return min(float(bucket.capacity), tokens + refill)

    def _store_tokens(self, user_id: str, tokens: float, bucket: TokenBucket) -> TokenBalance:
        if tokens >= bucket.capacity:
            self._budgets.pop(user_id, None)  # a full bucket is a missing one
        else:
            self._budgets[user_id] = (tokens, self._clock())
        return TokenBalance(tokens, bucket)
