"""The accounts section (``[accounts]``, ``PARLEY_ACCOUNTS__…``; the former flat names such
as ``PARLEY_SESSION_TTL_SECONDS`` still read): sessions, API keys, and how logins and
sign-ups are slowed."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from parley.accounts.oidc_settings import OidcProvider


class ConfirmEmail(StrEnum):
    OFF = "off"  # no confirmation asked
    CHAT = "chat"  # a new account signs in, but chats only once its email is confirmed
    SIGNIN = "signin"  # a new account signs in only once its email is confirmed


class AccountSettings(BaseModel):
    model_config = {"extra": "forbid"}

    session_ttl_seconds: int = Field(
        default=30 * 24 * 3600, gt=0, description="A session's longest life."
    )
    session_idle_timeout_seconds: int = Field(
        default=7 * 24 * 3600, ge=120, description="A session unused this long is refused."
    )
    auth_cache_seconds: float = Field(
        default=5,
        ge=0,
        le=300,
        description="How long a process trusts an API key it checked (0: every time); a "
        "revocation made in another process takes effect here within it.",
    )
    max_key_name_chars: int = Field(default=100, gt=0, description="An API key's name, at most.")
    local_passwords: bool = Field(
        default=True,
        description="Sign-up and sign-in with a password; off: only the identity providers.",
    )
    oidc: list[OidcProvider] = Field(
        default_factory=list, description="OpenID Connect providers users may sign in with."
    )
    login_free_failures: int = Field(
        default=5, ge=1, description="Failures for one (email, address) before slowing."
    )
    login_failure_window_seconds: int = Field(
        default=900, gt=0, description="How long a failure counts."
    )
    login_max_delay_seconds: int = Field(
        default=900, gt=0, description="The longest a much-failing (email, address) waits."
    )
    login_email_free_failures: int = Field(
        default=20, ge=1, description="Failures for one email, any address, before slowing."
    )
    login_email_max_delay_seconds: float = Field(
        default=10, gt=0, description="The longest a login for a much-failed email is held."
    )
    signup_free_attempts_per_address: int = Field(
        default=20, ge=1, description="Sign-ups from one address per window before 429."
    )
    challenge_after_failures: int = Field(
        default=3,
        ge=0,
        description="Failures for one (email, address) before a sign-in "
        "needs a proof-of-work (0: always).",
    )
    challenge_after_email_failures: int = Field(
        default=10, ge=0, description="Failures for one email, any address, before it does."
    )
    challenge_after_address_failures: int = Field(
        default=10, ge=0, description="Failures from one address, any email, before it does."
    )
    signup_challenge_after: int = Field(
        default=3,
        ge=0,
        description="Sign-ups from one address a window before the next needs a proof-of-work.",
    )
    challenge_max_number: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="The proof-of-work's difficulty: the browser tries about half as many hashes.",
    )
    challenge_seconds: int = Field(
        default=300, ge=10, description="How long a proof-of-work challenge may be solved in."
    )
    confirm_email: ConfirmEmail = Field(
        default=ConfirmEmail.OFF,
        description="Mail a link to confirm a new account's email (needs `[mail]`): `chat` "
        "(it may sign in, not chat, until then) or `signin` (not even sign in).",
    )
    reset_link_minutes: int = Field(
        default=30, ge=5, le=24 * 60, description="How long a password reset link works."
    )
    reset_requests_per_address: int = Field(
        default=5,
        ge=1,
        description="Reset mails one address may ask for before each next waits 1, 2, 4 … s "
        "(up to an hour; 429 until then).",
    )
    reset_requests_per_email: int = Field(
        default=3,
        ge=1,
        description="Reset mails one email may be sent before each next waits as above.",
    )
    signup_window_seconds: int = Field(
        default=3600, gt=0, description="The window sign-ups are counted in."
    )
