"""A chat's rolling summary: a fold begun (one at a time per chat), let go when its
background run ends without a summary (in the run's own finishing transaction), landed once
the worker has warmed the prompt prefix it makes (``runs.generation.Prompting``).

The chat's ``summary`` covers its messages up to ``summary_through_seq``; ``summary_run_id``
is the fold under way, or completed and landing. A fold lands only if it is still the chat's
fold under way, so two folds never interleave, and a failed, cancelled or empty one leaves
the summary as it was. A completed fold that never lands (its worker died while warming) is
under way no longer after ``LANDING_GRACE``: the next fold begins from the summary in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import (
    BACKGROUND_PRIORITY,
    TERMINAL_RUN_STATUSES,
    RunSource,
    RunStatus,
    new_id,
    utcnow,
)
from parley.engines.sampling import GREEDY
from parley.store.schema import Chat, Run

# a summary longer than this (in characters) is cut: the model was asked for far less
MAX_SUMMARY_CHARS = 20_000
# a completed fold not landed within this long is given up (the worker warming it died)
LANDING_GRACE = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class Fold:
    """A fold to make: messages ``after_seq``+1..``through_seq`` of the user's chat into its
    summary, by ``model`` asked with ``input_json`` (``runs.inputs.RunInput``)."""

    user_id: str
    chat_id: str
    after_seq: int
    through_seq: int
    model: str
    tier: str
    max_tokens: int
    input_json: str


async def begin_fold(s: AsyncSession, fold: Fold) -> Run | None:
    """The background run of ``fold``; None if a fold is under way in the chat, or its
    summary has moved past ``fold.after_seq``."""
    run_id = new_id("run")
    if not await _take_chat(s, fold, run_id):
        return None
    run = Run(
        id=run_id,
        user_id=fold.user_id,
        chat_id=fold.chat_id,
        source=RunSource.SUMMARY,
        input=fold.input_json,
        status=RunStatus.QUEUED,
        model=fold.model,
        tier=fold.tier,
        max_tokens=fold.max_tokens,
        sampling=GREEDY,
        priority=BACKGROUND_PRIORITY,
        summary_through_seq=fold.through_seq,
        attempts=0,
        created_at=utcnow(),
    )
    s.add(run)
    await s.flush()
    return run


async def _take_chat(s: AsyncSession, fold: Fold, run_id: str) -> bool:
    """Mark the chat's fold under way as ``run_id``, if none is: its run ended without a
    summary, or completed long ago and never landed."""
    given_up = or_(Run.status != RunStatus.COMPLETED, Run.finished_at < utcnow() - LANDING_GRACE)
    ended = select(Run.id).where(and_(Run.status.in_(TERMINAL_RUN_STATUSES), given_up))
    idle = or_(Chat.summary_run_id.is_(None), Chat.summary_run_id.in_(ended))
    taken = await s.execute(
        update(Chat)
        .where(
            Chat.user_id == fold.user_id,
            Chat.id == fold.chat_id,
            Chat.summary_through_seq == fold.after_seq,
            idle,
        )
        .values(summary_run_id=run_id)
    )
    return bool(getattr(taken, "rowcount", 0))


async def let_go(s: AsyncSession, run: Run) -> None:
    """The fold ``run`` is no longer under way (it was never queued, or it ended)."""
    await s.execute(
        update(Chat)
        .where(Chat.id == run.chat_id, Chat.summary_run_id == run.id)
        .values(summary_run_id=None)
    )


def summary_text(text: str | None) -> str:
    """A fold's answer as the chat's summary ('' if none)."""
    return (text or "").strip()[:MAX_SUMMARY_CHARS]


async def ended(s: AsyncSession, run: Run, text: str) -> None:
    """A fold run ended (in its finishing transaction): unless it completed with a summary
    (to land once its prefix is warm), the chat's fold is let go."""
    if run.status is not RunStatus.COMPLETED or not summary_text(text):
        await let_go(s, run)


async def land(s: AsyncSession, run: Run) -> bool:
    """The completed fold ``run`` becomes the chat's summary (covering messages up to its
    ``summary_through_seq``), if it is still the chat's fold under way."""
    summary = summary_text(run.output)
    if run.status is not RunStatus.COMPLETED or not summary or run.summary_through_seq is None:
        await let_go(s, run)
        return False
    landed = await s.execute(
        update(Chat)
        .where(Chat.id == run.chat_id, Chat.summary_run_id == run.id)
        .values(
            summary=summary,
            summary_through_seq=run.summary_through_seq,
            summary_run_id=None,
            summary_updated_at=utcnow(),
        )
    )
    return bool(getattr(landed, "rowcount", 0))


async def abandon(s: AsyncSession, run: Run) -> None:
    """A fold that never reached the queue: its run deleted, the chat's fold let go."""
    await let_go(s, run)
    await s.delete(run)
