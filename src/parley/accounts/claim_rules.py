"""An identity provider's say over a user's tier and role: the operator's rules read the
claims it gives (an OpenID Connect sign-in's ID token, a SCIM push's groups), applied by
``Management`` with the rule that made each change on the audit record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parley.accounts.management import LastAdmin, Management, UserChange
from parley.accounts.oidc_settings import ClaimRule
from parley.audit.actions import Actor
from parley.domain import UserRole


def ruled_change(
    rules: list[ClaimRule], claims: dict[str, Any], default_tier: str
) -> tuple[UserChange, str] | None:
    """The tier and role the rules say (those they have rules for): the first rule that
    matches, else the default tier and the user role — so a group taken away at the
    provider takes its tier or role away; None when there are no such rules."""
    tier = next((r for r in rules if r.tier and r.matches(claims)), None)
    role = next((r for r in rules if r.role and r.matches(claims)), None)
    has_tiers = any(r.tier for r in rules)
    has_roles = any(r.role for r in rules)
    if not (has_tiers or has_roles):
        return None
    change = UserChange(
        tier=(tier.tier if tier else default_tier) if has_tiers else None,
        role=(role.role if role else UserRole.USER) if has_roles else None,
    )
    if tier is None and role is None:
        return change, "no rule matched"
    parts = [(has_tiers, tier, "tier"), (has_roles, role, "role")]
    why = [
        f"{r.claim}={r.value}" if r else f"no {what} rule matched" for has, r, what in parts if has
    ]
    return change, "; ".join(why)


async def apply_rules(
    manage: Management,
    source: str,
    user_id: str,
    rules: list[ClaimRule],
    claims: dict[str, Any],
    default_tier: str,
) -> None:
    """The rules applied to the user, on the record as ``<source>:<why>``; the last admin
    who can still sign in is kept an admin (someone must be able to administer)."""
    ruled = ruled_change(rules, claims, default_tier)
    if ruled is None:
        return
    change, why = ruled
    rule, actor = f"{source}:{why}", Actor(None, source)
    try:
        await manage.change(actor, user_id, change, rule)
    except LastAdmin:
        kept = f"{rule} (kept admin: the last one)"
        await manage.change(actor, user_id, replace(change, role=None), kept)
