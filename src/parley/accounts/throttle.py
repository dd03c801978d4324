"""Throttling password guesses and sign-ups, on the bus (so every api process agrees).

Logins (and password changes, which check the current password) count by **(email, client
address)**: ``login_free_failures`` attempts, then each further one must wait 1, 2, 4 … s
after the one before, up to ``login_max_delay_seconds``: a 429 with ``Retry-After``. An
attacker so locks out only their own address, never the owner's. Per **email** from any
address there is a higher count (``login_email_free_failures``) past which an attempt is
held for the same schedule, capped at ``login_email_max_delay_seconds``, then checked as
usual: that slows a guesser spread over many addresses and never refuses the right
password. A success forgets both records. Attempts are recorded before the password is
checked, atomically, so concurrent guesses cannot all pass one check.

Past a few failures (``challenge_after_failures`` for the pair, ``…_email_failures`` for
the email, ``…_address_failures`` for the address whatever the email: credential stuffing)
a sign-in needs a solved proof-of-work (``accounts/challenge.py``) before its password is
even counted; so does a sign-up past ``signup_challenge_after`` from one address.

Sign-ups count by client address (``signup_free_attempts_per_address`` a window, then the
same doubling up to the window): an answer of "this email is taken" is the price of a clear
sign-up, and this bounds how many addresses one client can test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from parley.accounts.settings import AccountSettings
from parley.bus.interface import AttemptThrottles, Backoff
from parley.errors import RateLimited

UNKNOWN_ADDRESS = "unknown"


class AccountThrottles:
    def __init__(
        self,
        bus: AttemptThrottles,
        settings: AccountSettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._bus = bus
        self._sleep = sleep
        window = settings.login_failure_window_seconds
        self._pair = Backoff(settings.login_free_failures, settings.login_max_delay_seconds, window)
        self._email = Backoff(
            settings.login_email_free_failures, settings.login_email_max_delay_seconds, window
        )
        self._signup = Backoff(
            settings.signup_free_attempts_per_address,
            settings.signup_window_seconds,
            settings.signup_window_seconds,
        )
        self._settings = settings
        hour = 3600
        self._reset_address = Backoff(settings.reset_requests_per_address, hour, hour)
        self._reset_email = Backoff(settings.reset_requests_per_email, hour, hour)
        # failures from an address, only counted (never refused: a NAT hides many users)
        self._address = Backoff(10**9, 1, window)

    @property
    def bus(self) -> AttemptThrottles:
        return self._bus

    async def login_challenged(self, email: str, address: str | None) -> bool:
        """Whether a sign-in for ``email`` from ``address`` needs a proof-of-work first."""
        limits = self._settings
        return (
            await self._bus.attempts(_pair_key(email, address)) >= limits.challenge_after_failures
            or await self._bus.attempts(_email_key(email)) >= limits.challenge_after_email_failures
            or await self._bus.attempts(_address_key(address))
            >= limits.challenge_after_address_failures
        )

    async def login_failed(self, address: str | None) -> None:
        """A failed sign-in from ``address`` (whatever its email), counted."""
        await self._bus.attempt(_address_key(address), self._address, refuse=False)

    async def before_reset_request(self, email: str, address: str | None) -> None:
        """Count a reset mail asked for ``email`` from ``address``; RateLimited past either
        allowance (an unknown email counts as a known one: the answer tells nothing)."""
        for key, backoff in (
            (f"reset-address\x1f{address or UNKNOWN_ADDRESS}", self._reset_address),
            (f"reset-email\x1f{email.strip().lower()}", self._reset_email),
        ):
            attempt = await self._bus.attempt(key, backoff)
            if not attempt.allowed:
                raise RateLimited(
                    "too many reset mails asked for; try again later",
                    code="too_many_reset_requests",
                    retry_after=attempt.wait,
                )

    async def signup_challenged(self, address: str | None) -> bool:
        found = await self._bus.attempts(_signup_key(address))
        return found >= self._settings.signup_challenge_after

    async def before_password_check(self, email: str, address: str | None) -> None:
        """Count a password guess for ``email`` from ``address``: RateLimited when that pair
        has failed too often; held a while when the email has, from anywhere."""
        pair = await self._bus.attempt(_pair_key(email, address), self._pair)
        if not pair.allowed:
            raise RateLimited(
                "too many failed logins from here; try again later",
                code="too_many_login_attempts",
                retry_after=pair.wait,
            )
        hot = await self._bus.attempt(_email_key(email), self._email, refuse=False)
        if hot.wait > 0:
            await self._sleep(hot.wait)

    async def password_ok(self, email: str, address: str | None) -> None:
        """The password was right: forget the failures of the pair and of the email."""
        await self._bus.forget_attempts(_pair_key(email, address))
        await self._bus.forget_attempts(_email_key(email))

    async def before_signup(self, address: str | None) -> None:
        """Count a sign-up from ``address``; RateLimited past the allowance."""
        attempt = await self._bus.attempt(_signup_key(address), self._signup)
        if not attempt.allowed:
            raise RateLimited(
                "too many sign-ups from this address; try again later",
                code="too_many_signups",
                retry_after=attempt.wait,
            )


def _pair_key(email: str, address: str | None) -> str:
    return f"login\x1f{email.strip().lower()}\x1f{address or UNKNOWN_ADDRESS}"


def _address_key(address: str | None) -> str:
    return f"login-address\x1f{address or UNKNOWN_ADDRESS}"


def _signup_key(address: str | None) -> str:
    return f"signup\x1f{address or UNKNOWN_ADDRESS}"


def _email_key(email: str) -> str:
    return f"login-email\x1f{email.strip().lower()}"
