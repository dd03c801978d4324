"""A prompt the content policy refuses: checked before admission, stored as refused.

``Refusals.check`` asks the ``Moderator`` about a run to make, before anything is admitted,
reserved or queued. Passed: nothing happens. Refused by a verdict: the run is made (a chat's
with its user message and its assistant message, so the user sees the refusal in the chat;
a program's on its own) and at once ended ``rejected`` (``content_blocked``, finish reason
``content_filter``) through the ``Finisher``, holding no reservation, so it is never billed
and never reaches a queue or an engine; then ``ContentBlocked`` (400, naming the category) is
raised. Refused because a fail-closed classifier could not answer: nothing is stored, and
``ModerationUnavailable`` (503) asks the client to retry.

A same-key retry of a refused request finds the refused run and is refused the same way
(stored once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import CONTENT_BLOCKED, FinishReason, RunStatus
from parley.errors import ContentBlocked, ModerationUnavailable
from parley.runs.finisher import Finisher
from parley.safety.interface import Stage
from parley.safety.moderator import Moderator, Ruling
from parley.store import chats, new_runs
from parley.store.database import Database
from parley.store.run_ends import Outcome
from parley.store.schema import Run

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0

Existing = Callable[[new_runs.NewRun], Awaitable[Run | None]]
"""The run an earlier request with the same Idempotency-Key made, if any."""


class Refusals:
    def __init__(self, db: Database, finisher: Finisher, moderator: Moderator) -> None:
        self._db = db
        self._finisher = finisher
        self._moderator = moderator

    async def check(self, new: new_runs.NewRun, text: str, existing: Existing) -> Run | None:
        """Nothing if ``text`` may be run; raises if it is refused. A same-key request that
        made its run already (under a policy that passed it) is answered with that run."""
        ruling = await self._moderator.check_input(new.tier, text)
        if not ruling.blocked:
            return None
        message = ruling.message(Stage.INPUT)
        if ruling.unavailable:
            raise ModerationUnavailable(message, retry_after=RETRY_SECONDS)
        log.info("a prompt was refused by %s (%s)", ruling.classifier, ruling.category)
        earlier = await existing(new) if new.idempotency_key is not None else None
        if earlier is None:
            earlier = await self._store(new, ruling, message, existing)
        if earlier.error_code != CONTENT_BLOCKED:
            return earlier  # made before, when the policy passed it: the same request's run
        raise ContentBlocked(earlier.error_message or message, category=ruling.category)

    async def _store(
        self, new: new_runs.NewRun, ruling: Ruling, message: str, existing: Existing
    ) -> Run:
        """The refused run, made and ended rejected at once (unreserved: nothing to settle)."""
        new = replace(new, reserved_tokens=None, claimed_by=None)

        async def make(s: AsyncSession) -> Run:
            if new.chat_id is not None:
                await chats.get_chat(s, user_id=new.user_id, chat_id=new.chat_id)
            return await new_runs.create_run(s, new)

        outcome = Outcome(
            status=RunStatus.REJECTED,
            finish_reason=FinishReason.CONTENT_FILTER,
            error_code=ruling.code,
            error_message=message,
        )
        try:
            return await self._finisher.made_ended(make, outcome)
        except new_runs.DuplicateIdempotencyKey:
            earlier = await existing(new)  # a same-key request stored it first
            if earlier is None:
                raise
            return earlier
