"""What the fault tests do and check through the public API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import select

from parley.domain import RunStatus
from parley.store.database import Database
from parley.store.schema import Run
from tests.helpers import assert_error
from tests.runs.helpers import JSON, wait_run
from tests.sse import Event, events
from tests.waiting import eventually

RECOVERY_SECONDS = 20.0


async def send(client: httpx.AsyncClient, auth: dict[str, str], chat_id: str) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "hello"}, headers={**auth, **JSON}
    )


async def recovered(client: httpx.AsyncClient, auth: dict[str, str], chat_id: str) -> None:
    """A send goes through again and its run completes: no restart was needed."""

    async def accepted() -> dict[str, Any] | None:
        r = await send(client, auth, chat_id)
        if r.status_code == 503:
            assert_error(r, 503, "dependency_unavailable")
            return None
        assert r.status_code == 202, r.text
        body: dict[str, Any] = r.json()
        return body

    sent = await eventually(accepted, "a send accepted again", timeout=RECOVERY_SECONDS)
    run = await wait_run(client, auth, sent["run_id"], timeout=RECOVERY_SECONDS)
    assert run["status"] == "completed", run


async def no_run_left_open(db_url: str) -> None:
    db = Database(db_url)
    try:

        async def settled() -> bool | None:
            async with db.transaction() as s:
                open_runs = await s.scalars(
                    select(Run.id).where(Run.status.in_([RunStatus.QUEUED, RunStatus.RUNNING]))
                )
                return True if not list(open_runs) else None

        await eventually(settled, "every run ended", timeout=RECOVERY_SECONDS)
    finally:
        await db.dispose()


async def send_streamed(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    chat_id: str,
    *,
    at_third_delta: Callable[[], None],
) -> list[Event]:
    """A message sent with its answer streamed (SSE) to the end; ``at_third_delta`` is
    called once the third delta has come."""
    seen: list[Event] = []
    async with client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json={"content": "hello"},
        headers={**auth, "Accept": "text/event-stream"},
    ) as r:
        assert r.status_code == 200
        async for ev in events(r):
            seen.append(ev)
            if ev.event == "delta" and sum(e.event == "delta" for e in seen) == 3:
                at_third_delta()
    return seen


async def resume(
    client: httpx.AsyncClient, auth: dict[str, str], run_id: str, last_id: str
) -> list[Event]:
    """The run's stream resumed from ``last_id`` to its end, once the bus lets it (503s
    while it is down are waited out)."""

    async def resumed() -> list[Event] | None:
        async with client.stream(
            "GET", f"/api/runs/{run_id}/events", headers={**auth, "Last-Event-ID": last_id}
        ) as r:
            if r.status_code == 503:
                return None
            assert r.status_code == 200, await r.aread()
            return [e async for e in events(r)]

    return await eventually(resumed, "the stream resumed", timeout=RECOVERY_SECONDS)
