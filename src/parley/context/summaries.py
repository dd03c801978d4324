"""The rolling summary: a chat's oldest turns folded into its summary by the model.

When a run's prompt finds the chat's unsummarized turns past the trigger
(``assembly.fold_plan``), the worker asks for a fold here, once the run has ended.
A fold is a background run (``RunSource.SUMMARY``) at ``BACKGROUND_PRIORITY``: queued below
every tier's runs, never holding a user's run slot or counting in a model's load, never
billed (it reserves nothing, so nothing is settled). One fold per chat is under way at a
time (``store/summaries.begin_fold``); failed, cancelled or empty, its run's finishing
transaction lets it go, the previous summary in place; completed, the worker prefills the
prefix it makes and then lands it as the chat's summary (``runs.generation.Prompting``,
``store/summaries.land``). A chat whose fold keeps failing still serves: its window slides
by whole chunks and retrieval reaches what fell out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from parley.bus.interface import Bus, QueuedRun, QueueFull
from parley.context.assembly import FoldPlan
from parley.context.settings import ContextSettings
from parley.domain import BACKGROUND_PRIORITY, MessageRole
from parley.engines.interface import ChatMessage
from parley.runs.inputs import RunInput
from parley.store import summaries
from parley.store.database import Database
from parley.store.schema import Run

log = logging.getLogger(__name__)

# a message longer than this is cut in the fold's prompt: a summary keeps its gist only
FOLD_MESSAGE_CHARS = 2_000

INSTRUCTIONS = (
    "You maintain the running summary of a conversation between a user and an assistant. "
    "Rewrite the summary so that it also covers the new messages. Keep every fact the user "
    "stated about themselves or their work (names, numbers, dates, preferences, decisions) "
    "and what the assistant concluded or promised; drop greetings and filler. Write plain "
    "sentences in the third person, at most {words} words. Reply with the summary only."
)


def fold_messages(plan: FoldPlan, max_tokens: int) -> list[ChatMessage]:
    """The fold's prompt: the instructions, the summary so far and the turns to fold in."""
    turns = "\n".join(f"[message {t.seq}, {t.role}] {_cut(t.content)}" for t in plan.turns)
    before = plan.summary or "(none yet: this is the start of the conversation)"
    request = f"Summary so far:\n{before}\n\nNew messages:\n{turns}\n\nWrite the updated summary."
    return [
        ChatMessage(MessageRole.SYSTEM.value, INSTRUCTIONS.format(words=max_tokens * 3 // 4)),
        ChatMessage(MessageRole.USER.value, request),
    ]


def _cut(text: str) -> str:
    return text if len(text) <= FOLD_MESSAGE_CHARS else text[:FOLD_MESSAGE_CHARS] + "…"


class Summaries:
    def __init__(self, db: Database, bus: Bus, settings: ContextSettings) -> None:
        self._db = db
        self._bus = bus
        self._settings = settings
        self._tasks: set[asyncio.Task[None]] = set()

    def fold_soon(self, run: Run, plan: FoldPlan) -> None:
        """Ask for the fold after ``run`` (a chat's run whose prompt found it due)."""
        self.later(self.fold(run, plan))

    def later(self, work: Coroutine[Any, Any, object]) -> None:
        """Background work of the summaries (a fold asked for, a prefix warmed), kept until
        done or closed; its failure is logged, never raised."""
        task = asyncio.create_task(self._logged(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _logged(work: Coroutine[Any, Any, object]) -> None:
        try:
            await work
        except Exception:
            log.exception("background work of the chat summaries failed")

    async def fold(self, run: Run, plan: FoldPlan) -> Run | None:
        """Queue the fold of ``plan`` in ``run``'s chat, unless one is under way already;
        the fold's run, or None. Never raises: a fold not made is asked for again."""
        try:
            return await self._fold(run, plan)
        except Exception:
            log.exception("folding the summary of chat %s failed", run.chat_id)
            return None

    async def _fold(self, run: Run, plan: FoldPlan) -> Run | None:
        assert run.chat_id is not None
        max_tokens = self._settings.summary_max_tokens
        request = RunInput(fold_messages(plan, max_tokens))
        async with self._db.transaction() as s:
            fold = await summaries.begin_fold(
                s,
                summaries.Fold(
                    user_id=run.user_id,
                    chat_id=run.chat_id,
                    after_seq=plan.after_seq,
                    through_seq=plan.through_seq,
                    model=run.model,
                    tier=run.tier,
                    max_tokens=max_tokens,
                    input_json=request.to_json(),
                ),
            )
        if fold is None:
            return None
        try:
            await self._bus.enqueue(QueuedRun(fold.id, BACKGROUND_PRIORITY))
        except QueueFull:  # busy: the fold is let go, and asked for again at a later turn
            async with self._db.transaction() as s:
                await summaries.abandon(s, fold)
            return None
        log.info(
            "chat %s: folding messages up to %d (run %s)", run.chat_id, plan.through_seq, fold.id
        )
        return fold

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
