"""Usage across users, from the run records (the admin console's report): tokens and runs
per day, user, model, API key and source, over the runs that ended in a period — the same
runs, and the same tokens, the ``parley_prompt_tokens`` and ``parley_completion_tokens``
counters add up as each run ends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.store.schema import Run, User

MAX_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: str  # YYYY-MM-DD (UTC) the run ended
    user_id: str
    email: str
    model: str
    api_key_id: str | None
    source: str
    runs: int
    prompt_tokens: int
    completion_tokens: int


async def usage(s: AsyncSession, *, since: datetime, until: datetime) -> list[UsageRow]:
    day = _utc_day(s)
    query = (
        select(
            day,
            Run.user_id,
            User.email,
            Run.model,
            Run.api_key_id,
            Run.source,
            func.count(),
            func.coalesce(func.sum(Run.prompt_tokens), 0),
            func.coalesce(func.sum(Run.completion_tokens), 0),
        )
        .join(User, User.id == Run.user_id)
        .where(Run.finished_at.is_not(None), Run.finished_at >= since, Run.finished_at < until)
        .group_by(day, Run.user_id, User.email, Run.model, Run.api_key_id, Run.source)
        .order_by(day, User.email, Run.model)
        .limit(MAX_ROWS)
    )
    return [
        UsageRow(
            str(d), u, e, m, k, str(getattr(src, "value", src)), int(n), int(p or 0), int(c or 0)
        )
        for d, u, e, m, k, src, n, p, c in (await s.execute(query)).all()
    ]


def _utc_day(s: AsyncSession) -> ColumnElement[str]:
    """The UTC day a run ended, as text: Postgres converts from the session's zone; SQLite
    keeps UTC times as ISO text already."""
    if s.get_bind().dialect.name == "postgresql":
        return func.to_char(func.timezone("UTC", Run.finished_at), "YYYY-MM-DD")
    return func.substr(Run.finished_at, 1, 10)
