"""Custom instructions are a prompt's text like any message: the tier's input policy checks
them when they are saved (a refusal is 400 ``content_blocked`` naming ``instructions``)."""

from __future__ import annotations

from parley.accounts.principal import Principal
from parley.errors import ContentBlocked, ModerationUnavailable
from parley.safety.interface import Stage
from parley.services import Services

RETRY_SECONDS = 2.0


async def screened(svc: Services, who: Principal, text: str | None) -> str | None:
    """``text`` if the user's tier may send it (None and "" pass: nothing to check)."""
    if not text:
        return text
    ruling = await svc.moderator.check_input(who.tier, text)
    if not ruling.blocked:
        return text
    message = ruling.message(Stage.INPUT)
    if ruling.unavailable:
        raise ModerationUnavailable(message, retry_after=RETRY_SECONDS)
    refused = ContentBlocked(f"instructions: {message}", category=ruling.category)
    refused.param = "instructions"
    raise refused
