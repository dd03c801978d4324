"""The SCIM section (``[scim]``, ``PARLEY_SCIM__…``): the bearer token identity providers
provision with, and what their pushes do to accounts."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, SecretStr

from parley.accounts.oidc_settings import ClaimRule


class OnDelete(StrEnum):
    DISABLE = "disable"  # the account kept (its chats for the organisation), unable to sign in
    DELETE = "delete"  # the account and everything of it deleted


class ScimSettings(BaseModel):
    model_config = {"extra": "forbid"}

    token: SecretStr | None = Field(
        default=None,
        min_length=32,
        description="The bearer token of `/scim/v2` (at least 32 characters); unset: no SCIM.",
    )
    rules: list[ClaimRule] = Field(
        default_factory=list,
        description="Tier and role from a provisioned user's `groups` (display names) or "
        "`userType`, applied at every push that changes them.",
    )
    link_existing_email: bool = Field(
        default=False,
        description="A provisioned user whose email is an existing account's takes it over; "
        "otherwise the push is refused (409): a password sign-up proves no email.",
    )
    on_delete: OnDelete = Field(
        default=OnDelete.DISABLE,
        description="What a provider's DELETE of a user does: `disable` (keeps its chats) or "
        "`delete` (the account and all of it). Both end its sessions and keys at once.",
    )
    max_results: int = Field(
        default=500, ge=1, le=10_000, description="The most resources one search answers."
    )
