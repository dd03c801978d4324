"""Dependency outages on the split stack (Postgres + Redis, api and worker in one process
here), each dependency reached through a ``FaultProxy`` that the test cuts and restores:
the service degrades honestly — reads that need only the database keep working while the
bus is down, what cannot be done answers 503 ``dependency_unavailable`` with Retry-After
(never a 500, and the connection stays usable) — and it recovers by itself, with no
restart, once the dependency is back; no run is left queued or running."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from parley.bus.redis.health import HEALTH_CHECK_SECONDS
from parley.services import Services
from tests.builders import BACKENDS
from tests.faults.helpers import (
    RECOVERY_SECONDS,
    no_run_left_open,
    recovered,
    resume,
    send,
    send_streamed,
)
from tests.faults.proxy import FaultProxy
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.sse import events, text_of
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS, reason="the split stack's faults")


async def test_a_redis_outage_keeps_reads_refuses_sends_and_heals(
    client: httpx.AsyncClient, redis_proxy: FaultProxy, postgres_url: str
) -> None:
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    first = await send_json(client, auth, chat_id)
    assert (await wait_run(client, auth, first["run_id"]))["status"] == "completed"

    redis_proxy.cut()
    assert (await client.get("/api/chats", headers=auth)).status_code == 200
    history = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    assert history.status_code == 200 and len(history.json()["data"]) == 2
    assert (await client.get(f"/api/runs/{first['run_id']}", headers=auth)).status_code == 200
    assert (await client.get("/api/me", headers=auth)).status_code == 200
    r = await send(client, auth, chat_id)
    error = assert_error(r, 503, "dependency_unavailable")
    assert "message bus" in error["message"]
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["bus"] != "ok"
    assert ready.json()["checks"]["store"] == "ok"
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/api/chats", headers=auth)).status_code == 200  # same connection

    redis_proxy.restore()
    await recovered(client, auth, chat_id)
    assert (await client.get("/readyz")).status_code == 200
    await no_run_left_open(postgres_url)


async def test_connections_a_restarted_redis_left_behind_fail_no_send_and_no_run(
    client: httpx.AsyncClient, split: Services, redis_proxy: FaultProxy, postgres_url: str
) -> None:
    """Redis restarted in a container: the pool's idle connections still look open (no FIN
    came) and die at their next command. An idle connection is PINGed before use and the
    PING, not the command, is tried again on a new connection: the next sends are accepted
    and their runs completed, as if nothing had happened (parley.bus.redis.health)."""
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    first = await send_json(client, auth, chat_id)
    assert (await wait_run(client, auth, first["run_id"]))["status"] == "completed"
    await asyncio.gather(*(split.bus.queue_depth() for _ in range(20)))  # 20 in the pool
    redis_proxy.reset_on_next_request()  # Redis restarted: every connection dead, unsaid
    # it was down a while (a container restarts in seconds): what the sweeper and the worker
    # tried meanwhile failed (as it should), what they did not try is left idle, and stale
    await asyncio.sleep(HEALTH_CHECK_SECONDS + 0.5)
    # as many commands at once as the pool has connections: the stale ones among them too
    await asyncio.gather(*(split.bus.queue_depth() for _ in range(20)))
    for _ in range(3):
        r = await send(client, auth, chat_id)
        assert r.status_code == 202, r.text
        assert (await wait_run(client, auth, r.json()["run_id"]))["status"] == "completed"
    await no_run_left_open(postgres_url)


async def test_a_postgres_outage_refuses_with_503_and_heals(
    client: httpx.AsyncClient,
    postgres_proxy: FaultProxy,
    postgres_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    first = await send_json(client, auth, chat_id)
    assert (await wait_run(client, auth, first["run_id"]))["status"] == "completed"

    postgres_proxy.cut()
    r = await send(client, auth, chat_id)
    error = assert_error(r, 503, "dependency_unavailable")
    assert "database" in error["message"]
    r = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    assert_error(r, 503, "dependency_unavailable")
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["store"] != "ok"
    assert (await client.get("/healthz")).status_code == 200

    async def swept_twice() -> bool:  # sweeps (every 0.3 s) meet the outage, and say so
        return sum(r.getMessage().startswith("sweep failed") for r in caplog.records) >= 2

    await eventually(swept_twice, "two sweeps to meet the outage", timeout=15)

    postgres_proxy.restore()
    await recovered(client, auth, chat_id)
    history = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    assert len(history.json()["data"]) == 4  # two turns, each stored once
    # the background steps that failed meanwhile said so in one line each, naming the
    # database, without a traceback (an outage is expected, and retried)
    sweeps = [r for r in caplog.records if r.getMessage().startswith("sweep failed")]
    assert sweeps and all(r.levelname == "WARNING" and not r.exc_info for r in sweeps)
    assert all("the database" in r.getMessage() for r in sweeps), sweeps[0].getMessage()
    await no_run_left_open(postgres_url)


async def test_a_stream_cut_by_a_redis_outage_ends_with_an_error_and_resumes(
    slow_answers: None, client: httpx.AsyncClient, redis_proxy: FaultProxy
) -> None:
    """An open stream whose bus goes away ends with an ``error`` event
    (``dependency_unavailable``, ``retry_after``, no id: the client's Last-Event-ID stays the
    stream's last) instead of a cut connection. The worker, unable to publish, ends the run
    ``failed`` with the text it had (the documented rule); once the bus is back, a client
    resuming from its last id gets that text whole (``replace``) and ``done``."""
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    seen = await send_streamed(client, auth, chat_id, at_third_delta=redis_proxy.cut)
    last = seen[-1]
    assert last.event == "error" and last.id is None, seen
    assert last.data["code"] == "dependency_unavailable" and last.data["retry_after"] >= 1
    run_id = seen[0].data["run_id"]
    last_id = [e.id for e in seen if e.id is not None][-1]

    async def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = (await client.get(f"/api/runs/{run_id}", headers=auth)).json()
        return run if run["status"] == "failed" else None

    run = await eventually(ended, "the run ended failed", timeout=RECOVERY_SECONDS)
    assert run["error"]["code"] == "dependency_unavailable", run
    redis_proxy.restore()

    rest = await resume(client, auth, run_id, last_id)
    assert [e.event for e in rest] == ["delta", "done"], rest
    assert rest[0].data["replace"] is True
    stored = (await client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()["data"]
    answer = next(m for m in stored if m["role"] == "assistant")
    assert answer["status"] == "failed"
    assert rest[0].data["text"] == answer["content"] and answer["content"]
    assert rest[1].data["status"] == "failed"
    # read from the start, the stream (which never got its end) is followed by the stored
    # end after a quiet interval, not pinged for ever
    async with (
        asyncio.timeout(10),
        client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r,
    ):
        replay = [e async for e in events(r)]
    assert replay[-1].event == "done" and replay[-1].data["status"] == "failed", replay
    assert text_of(replay) == answer["content"]


async def test_a_run_streams_through_a_postgres_outage_and_is_stored_once_it_returns(
    slow_answers: None, client: httpx.AsyncClient, postgres_proxy: FaultProxy
) -> None:
    """The database goes away mid-answer: the run keeps streaming (its events go through the
    bus), its end is stored once the database is back (retried, not lost), and the client
    then gets ``done``; the answer is stored exactly once, whole. The outage outlasts the
    answer by more than two quiet intervals (1 s here), each of which has the relay ask the
    database whether the run ended: not knowing is no reason to end the stream."""
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)

    def outage() -> None:
        postgres_proxy.cut()
        asyncio.get_running_loop().call_later(4.5, postgres_proxy.restore)

    seen = await send_streamed(client, auth, chat_id, at_third_delta=outage)
    kinds = [e.event for e in seen]
    assert kinds[-1] == "done" and "error" not in kinds, kinds
    assert seen[-1].data["status"] == "completed"
    assert kinds.count("delta") == 40  # every token streamed, the outage notwithstanding
    stored = (await client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()["data"]
    answers = [m for m in stored if m["role"] == "assistant"]
    assert len(answers) == 1 and answers[0]["status"] == "completed"
    assert answers[0]["content"] == "".join(e.data["text"] for e in seen if e.event == "delta")


async def test_a_slow_redis_link_slows_answers_but_fails_none(
    client: httpx.AsyncClient, redis_proxy: FaultProxy, postgres_url: str
) -> None:
    """Every chunk to and from Redis held 30 ms (a congested link): sends are accepted and
    their runs complete, slower; nothing answers 5xx."""
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    redis_proxy.delay(0.03)
    for _ in range(3):
        sent = await send_json(client, auth, chat_id)
        run = await wait_run(client, auth, sent["run_id"], timeout=RECOVERY_SECONDS)
        assert run["status"] == "completed", run
    history = (await client.get(f"/api/chats/{chat_id}/messages", headers=auth)).json()["data"]
    assert len(history) == 6 and all(m["status"] == "completed" for m in history)
    await no_run_left_open(postgres_url)


async def test_a_database_connection_cut_mid_request_is_a_503_then_heals(
    client: httpx.AsyncClient, postgres_proxy: FaultProxy
) -> None:
    """Every database connection opened from now on is cut after 200 bytes towards the
    server (mid-handshake or mid-query): requests answer 503 ``dependency_unavailable``,
    never 500; once connections go through again, so do requests."""
    auth = await user_headers(client, "ada@example.com")
    chat_id = await new_chat(client, auth)
    postgres_proxy.drop_after(200)
    postgres_proxy.cut()  # the pooled connections go: new ones meet the drop
    postgres_proxy.restore_connections_only()
    r = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    assert_error(r, 503, "dependency_unavailable")
    postgres_proxy.restore()
    await recovered(client, auth, chat_id)
