"""The runs refused by the content policy, across users: what an operator looks into
(``parley runs refused``). Not a user's query: it is the admin's, so it is not scoped by
user (as ``users.list_users`` is not)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import RunStatus
from parley.store.schema import Run, User


@dataclass(frozen=True, slots=True)
class RefusedRun:
    run: Run
    email: str

    @property
    def stage(self) -> str:
        """``input``: refused before it ran; ``output``: stopped while it streamed."""
        return "input" if self.run.started_at is None else "output"


async def refused_runs(
    s: AsyncSession,
    *,
    codes: Sequence[str],
    since: datetime | None = None,
    email: str | None = None,
    limit: int = 50,
) -> list[RefusedRun]:
    """Runs ended ``rejected`` with one of ``codes``, newest first."""
    query = (
        select(Run, User.email)
        .join(User, User.id == Run.user_id)
        .where(Run.status == RunStatus.REJECTED, Run.error_code.in_(list(codes)))
    )
    if since is not None:
        query = query.where(Run.finished_at >= since)
    if email is not None:
        query = query.where(User.email == email)
    rows = await s.execute(query.order_by(Run.finished_at.desc(), Run.id.desc()).limit(limit))
    return [RefusedRun(run, found) for run, found in rows]
