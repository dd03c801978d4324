"""Per-user token budgets: a run's estimated cost is reserved at admission and settled to
what it really used when it ends.

Each user has a token bucket on the bus (its ``TokenBudgets`` section), shaped by
their tier: ``burst_tokens`` is its capacity, ``tokens_per_minute`` its continuous refill.

The reservation is ``max_tokens`` plus the whole prompt as it will be sent, history
included, counted with the model's tokenizer where the api process has one, else estimated
(``parley.qos.reservations`` and ``parley.qos.prompt_counter``). Settling replaces it by
``prompt_tokens + completion_tokens`` as the engine counted them, so a low count costs an
overrun (the balance may go negative) and a high one is refunded.

An estimate above the bucket's capacity is capped at it: a full bucket admits any run.
"""

from __future__ import annotations

import logging
import math

from parley.bus.interface import TokenBalance, TokenBucket, TokenBudgets, TokenReservation
from parley.errors import BudgetExhausted
from parley.qos.settings import QosSettings
from parley.store.schema import Run
from parley.tiers import TierSettings

log = logging.getLogger(__name__)


def bucket_of(tier: TierSettings) -> TokenBucket:
    return TokenBucket(capacity=tier.burst_tokens, per_minute=tier.tokens_per_minute)


def rate_limit_headers(balance: TokenBalance) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*-tokens`` headers for a balance (reset: seconds to full)."""
    return {
        "x-ratelimit-limit-tokens": str(balance.bucket.capacity),
        "x-ratelimit-remaining-tokens": str(_whole(balance.tokens)),
        "x-ratelimit-reset-tokens": f"{math.ceil(balance.seconds_to_full)}s",
    }


def exhausted(refused: TokenReservation) -> BudgetExhausted:
    wait = max(1, math.ceil(refused.retry_after))
    return BudgetExhausted(
        f"token budget exhausted: {_whole(refused.balance.tokens)} tokens left, "
        f"refills enough in {wait} s",
        retry_after=refused.retry_after,
        headers=rate_limit_headers(refused.balance),
    )


class Budget:
    """The users' token buckets, sized by their tiers. Holds no state of its own."""

    def __init__(self, bus: TokenBudgets, settings: QosSettings) -> None:
        self._bus = bus
        self._settings = settings

    def bucket(self, tier: str) -> TokenBucket:
        return bucket_of(self._settings.tier(tier))

    async def balance(self, user_id: str, tier: str) -> TokenBalance:
        return await self._bus.peek_tokens(user_id, self.bucket(tier))

    async def reserve(self, user_id: str, tier: str, cost: int) -> int:
        """Reserve ``cost`` (capped at the capacity); the amount reserved.

        Raises BudgetExhausted (429, with Retry-After and ``x-ratelimit-*``) when the
        balance does not cover it; nothing is taken then.
        """
        bucket = self.bucket(tier)
        amount = min(cost, bucket.capacity)
        reservation = await self._bus.reserve_tokens(user_id, amount, bucket)
        if not reservation.granted:
            raise exhausted(reservation)
        return amount

    async def release(self, user_id: str, tier: str, reserved: int) -> None:
        """Give a whole reservation back (the run was never made)."""
        await self.settle(user_id, tier, reserved, 0)

    async def settle_run(self, run: Run, reserved: int | None) -> None:
        """Settle the reservation a run gave up to the tokens it used (nothing if None)."""
        if reserved is None:
            return
        used = (run.prompt_tokens or 0) + (run.completion_tokens or 0)
        await self.settle(run.user_id, run.tier, reserved, used)

    async def settle(self, user_id: str, tier: str, reserved: int, used: int) -> None:
        """Never raises: the run has ended either way; a failed settle is a lost refund."""
        try:
            await self._bus.settle_tokens(user_id, reserved, used, self.bucket(tier))
        except Exception:
            log.exception(
                "settling %d reserved tokens to %d for user %s failed", reserved, used, user_id
            )


def _whole(tokens: float) -> int:
    """A balance as whole tokens left, never below zero."""
    return max(0, math.floor(tokens))
