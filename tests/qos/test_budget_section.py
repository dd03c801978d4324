"""A service takes only the bus's section it uses: the budget runs on a fake of the token
section alone (no queue, no streams), and does what it says with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.bus.interface import TokenBalance, TokenBucket, TokenReservation
from parley.config import load_settings
from parley.errors import BudgetExhausted
from parley.qos.budget import Budget


class OneBucket:
    """The token-budget section of a bus and nothing else: one user's balance."""

    def __init__(self, tokens: float) -> None:
        self.tokens = tokens
        self.settled: list[tuple[int, int]] = []

    async def reserve_tokens(
        self, user_id: str, amount: int, bucket: TokenBucket
    ) -> TokenReservation:
        if amount > self.tokens:
            return TokenReservation(False, TokenBalance(self.tokens, bucket), retry_after=7.0)
        self.tokens -= amount
        return TokenReservation(True, TokenBalance(self.tokens, bucket))

    async def settle_tokens(
        self, user_id: str, reserved: int, used: int, bucket: TokenBucket
    ) -> TokenBalance:
        self.settled.append((reserved, used))
        self.tokens += reserved - used
        return TokenBalance(self.tokens, bucket)

    async def peek_tokens(self, user_id: str, bucket: TokenBucket) -> TokenBalance:
        return TokenBalance(self.tokens, bucket)


async def test_the_budget_needs_only_the_token_section_of_a_bus(tmp_path: Path) -> None:
    section = OneBucket(tokens=100)
    budget = Budget(section, load_settings(data_dir=tmp_path).qos)
    assert await budget.reserve("ada", "free", 60) == 60
    with pytest.raises(BudgetExhausted) as refused:
        await budget.reserve("ada", "free", 60)
    assert refused.value.retry_after == 7.0
    await budget.release("ada", "free", 60)
    assert section.settled == [(60, 0)] and (await budget.balance("ada", "free")).tokens == 100
