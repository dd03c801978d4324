"""Token budgets through HTTP, on SQLite + in-process bus and Postgres + Redis: admission
reserves the estimate, the run's end settles it to the actual usage, once."""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from parley.domain import RunStatus
from parley.engines.fake import FakeEngine
from parley.runs.events import delta_event
from parley.services import Services
from parley.store import run_ends
from parley.store import run_records as run_store
from parley.store.schema import Run
from tests.helpers import assert_error
from tests.runs.helpers import JSON, new_chat, send_json, stored_message
from tests.sse import Event, collect
from tests.waiting import eventually


def tier(burst: int, per_minute: int = 1, max_output: int = 200, **more: Any) -> dict[str, Any]:
    """Settings overrides putting every new user on one tier (1 token a minute: no refill
    a test could see, so balances are exact)."""
    return {
        "default_tier": "metered",
        "tiers": {
            "metered": {
                "priority": 0,
                "tokens_per_minute": per_minute,
                "burst_tokens": burst,
                "max_concurrent_runs": 4,
                "max_output_tokens": max_output,
            }
        },
        **more,
    }


def estimate(content: str, max_tokens: int, *history: str) -> int:
    """What a send reserves: ``max_tokens`` plus its whole prompt (the chat's ``history``
    and the new message) as the fake engine counts it: its words + 4 a message."""
    return max_tokens + sum(len(text.split()) + 4 for text in (*history, content))


async def budget(client: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, Any]:
    r = await client.get("/api/me", headers=auth)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()["budget"]
    return found


async def follow(client: httpx.AsyncClient, auth: dict[str, str], run_id: str) -> Event:
    """The run's ``done`` event (the budget is settled before it is sent)."""
    async with client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        evs = await collect(r)
    assert evs[-1].event == "done"
    return evs[-1]


@pytest.mark.parametrize(
    "run_overrides", [tier(10_000, fake_engine={"time_to_first_token_ms": 1000})]
)
async def test_me_shows_the_reservation_then_the_actual_usage(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    assert await budget(run_client, auth) == {
        "limit_tokens": 10_000,
        "remaining_tokens": 10_000,
        "refill_tokens_per_minute": 1,
        "resets_in_seconds": 0,
    }
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id, "hello world", max_tokens=50)
    held = await budget(run_client, auth)  # the run waits 1 s for its first token
    assert held["remaining_tokens"] == 10_000 - estimate("hello world", 50)
    assert held["resets_in_seconds"] == pytest.approx(estimate("hello world", 50) * 60, rel=0.01)
    done = await follow(run_client, auth, accepted["run_id"])
    used = done.data["usage"]["total_tokens"]
    assert 0 < used < estimate("hello world", 50)
    settled = await budget(run_client, auth)
    assert settled["remaining_tokens"] == 10_000 - used


@pytest.mark.parametrize(
    "run_overrides", [tier(10_000, fake_engine={"time_to_first_token_ms": 1000})]
)
async def test_a_send_reserves_for_the_chats_history_too(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """The second message's prompt is the whole chat: its reservation counts the first
    message and its answer, as the engine will (the fake engine: words + 4 a message)."""
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "tell me a story", max_tokens=50)
    used = (await follow(run_client, auth, first["run_id"])).data["usage"]["total_tokens"]
    answer = (await stored_message(run_client, auth, chat_id, first["message_id"]))["content"]
    await send_json(run_client, auth, chat_id, "and then?", max_tokens=50)
    held = await budget(run_client, auth)  # the second run waits 1 s for its first token
    reserved = estimate("and then?", 50, "tell me a story", answer)
    assert reserved > estimate("and then?", 50) + len(answer.split())  # the history counts
    assert held["remaining_tokens"] == 10_000 - used - reserved


@pytest.mark.parametrize("run_overrides", [tier(100, per_minute=6, max_output=100)])
async def test_over_budget_is_429_with_retry_after_and_ratelimit_headers(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "hello", max_tokens=30)
    used = (await follow(run_client, auth, first["run_id"])).data["usage"]["total_tokens"]
    left = 100 - used  # (plus a trickle: 6 tokens a minute)
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hello", "max_tokens": 90},
        headers={**auth, **JSON},
    )
    error = assert_error(r, 429, "budget_exhausted")
    assert error["type"] == "rate_limit_error"
    answer = await stored_message(run_client, auth, chat_id, first["message_id"])
    # the whole prompt is reserved for: the first message and its answer, then this one
    # (128 tokens: capped at the bucket's capacity)
    cost = estimate("hello", 90, "hello", answer["content"])
    assert cost > 100
    short = 100 - left  # refilled at 0.1/s
    wait = int(r.headers["retry-after"])
    assert short * 10 - 5 <= wait <= short * 10
    assert re.fullmatch(
        rf"token budget exhausted: {left} tokens left, refills enough in \d+ s", error["message"]
    ), error["message"]
    assert r.headers["x-ratelimit-limit-tokens"] == "100"
    assert r.headers["x-ratelimit-remaining-tokens"] == str(left)
    reset = r.headers["x-ratelimit-reset-tokens"]
    assert reset.endswith("s")
    assert used * 10 - 5 <= int(reset[:-1]) <= used * 10
    # nothing was stored, nothing was taken; a smaller run still fits
    chat = (await run_client.get(f"/api/chats/{chat_id}", headers=auth)).json()
    assert chat["message_count"] == 2
    assert (await budget(run_client, auth))["remaining_tokens"] == left
    small = await send_json(run_client, auth, chat_id, "hello", max_tokens=20)
    await follow(run_client, auth, small["run_id"])


@pytest.mark.parametrize(
    "run_overrides", [tier(10_000, fake_engine={"time_to_first_token_ms": 1000})]
)
async def test_an_idempotent_retry_is_never_charged_twice(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    headers = {**auth, **JSON, "Idempotency-Key": "once"}
    body = {"content": "pay once", "max_tokens": 100}
    responses = await asyncio.gather(
        *(
            run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=headers)
            for _ in range(10)
        )
    )
    assert [r.status_code for r in responses] == [202] * 10
    run_id = responses[0].json()["run_id"]
    assert {r.json()["run_id"] for r in responses} == {run_id}
    # the requests that lost the race gave their reservations back
    cost = estimate("pay once", 100)
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - cost
    used = (await follow(run_client, auth, run_id)).data["usage"]["total_tokens"]
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - used
    retry = await run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=headers)
    assert retry.status_code == 202
    assert retry.json()["run_id"] == run_id
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - used


@pytest.mark.parametrize("run_overrides", [tier(300, fake_engine={"time_to_first_token_ms": 1000})])
async def test_a_retry_attaches_to_its_run_even_when_the_budget_is_spent(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    headers = {**auth, **JSON, "Idempotency-Key": "big"}
    body = {"content": "x", "max_tokens": 200}
    first = await run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=headers)
    assert first.status_code == 202
    assert (await budget(run_client, auth))["remaining_tokens"] == 300 - estimate("x", 200)
    retry = await run_client.post(f"/api/chats/{chat_id}/messages", json=body, headers=headers)
    assert retry.status_code == 202, retry.text  # not a 429: it costs nothing
    assert retry.json()["run_id"] == first.json()["run_id"]
    other = await run_client.post(
        f"/api/chats/{chat_id}/messages", json=body, headers={**auth, **JSON}
    )
    assert_error(other, 429, "budget_exhausted")


@pytest.mark.parametrize(
    "run_overrides",
    [tier(10_000, fake_engine={"time_to_first_token_ms": 30_000, "slots": 1})],
)
async def test_a_cancelled_run_gives_back_what_it_did_not_use(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "first", max_tokens=100)

    async def busy() -> bool:
        return engine.busy_slots == 1

    await eventually(busy, "the first run to take the engine's one slot")
    second = await send_json(run_client, auth, chat_id, "second", max_tokens=150)  # queued
    # the second's prompt: the first message too (its answer, still in progress, is not)
    both = estimate("first", 100) + estimate("second", 150, "first")
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - both
    r = await run_client.post(f"/api/chats/{chat_id}/runs/{second['run_id']}/cancel", headers=auth)
    assert r.json()["status"] == "cancelled"  # ended at once, having used nothing
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - estimate("first", 100)
    # the running one is stopped before its first token: it used nothing either
    await run_client.post(f"/api/chats/{chat_id}/runs/{first['run_id']}/cancel", headers=auth)
    done = await follow(run_client, auth, first["run_id"])
    assert done.data["status"] == "cancelled"
    assert done.data["usage"]["total_tokens"] == 0
    assert await budget(run_client, auth) == {
        "limit_tokens": 10_000,
        "remaining_tokens": 10_000,
        "refill_tokens_per_minute": 1,
        "resets_in_seconds": 0,
    }


@pytest.mark.parametrize("run_overrides", [tier(10_000)])
async def test_a_run_that_is_not_made_costs_nothing(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    r = await run_client.post(
        "/api/chats/chat_nope/messages", json={"content": "x"}, headers={**auth, **JSON}
    )
    assert_error(r, 404)
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000


@pytest.mark.parametrize(
    "run_overrides",
    [tier(10_000, fake_engine={"time_to_first_token_ms": 60_000}, lease_seconds=1)],
)
async def test_a_run_the_sweeper_fails_is_settled_once(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    """A run whose worker vanished after streaming two tokens: failed by the sweeper and
    settled to those two tokens; its reservation can be taken only that once."""
    worker = run_services.worker
    assert worker is not None
    await worker.stop(grace=0)  # this process's worker takes nothing more
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id, "hi", max_tokens=100)
    run_id = accepted["run_id"]
    # the reservation is held (checked before the ghost's short lease can lapse: once it
    # has, the sweeper may settle the run at any moment, however loaded the machine)
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - estimate("hi", 100)
    # what the ghost streamed, there before its lease can lapse
    await run_services.bus.append(run_id, delta_event("partial ", 1))
    await run_services.bus.append(run_id, delta_event("text", 1))
    async with run_services.db.transaction() as s:
        assert await run_store.claim(
            s, run_id=run_id, worker_id="ghost", lease=timedelta(seconds=0.5)
        )
    done = await follow(run_client, auth, run_id)
    assert done.data["status"] == "failed"
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - 2
    async with run_services.db.transaction() as s:
        assert await run_store.take_reservation(s, run_id=run_id) is None


@pytest.mark.parametrize("run_overrides", [tier(10_000)])
async def test_a_reservation_is_taken_off_its_run_exactly_once(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    worker = run_services.worker
    assert worker is not None
    await worker.stop(grace=0)  # the run stays queued, holding its reservation
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id, "hold", max_tokens=100)

    async def take() -> int | None:
        async with run_services.db.transaction() as s:
            return await run_store.take_reservation(s, run_id=accepted["run_id"])

    taken = await asyncio.gather(*(take() for _ in range(8)))
    assert sorted(taken, key=lambda t: t is None) == [estimate("hold", 100)] + [None] * 7


@pytest.mark.parametrize("run_overrides", [tier(100, fake_engine={"time_to_first_token_ms": 500})])
async def test_a_run_dearer_than_the_whole_budget_is_admitted_on_a_full_one(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id, "big", max_tokens=200)
    assert (await budget(run_client, auth))["remaining_tokens"] == 0  # capped at the capacity
    used = (await follow(run_client, auth, accepted["run_id"])).data["usage"]["total_tokens"]
    assert (await budget(run_client, auth))["remaining_tokens"] == 100 - used


async def _program_key(client: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, str]:
    r = await client.post("/api/keys", json={"name": "script"}, headers=auth)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.mark.parametrize("run_overrides", [tier(10_000)])
async def test_a_programs_answer_is_settled_to_what_it_used(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """A ``/v1`` run ends in one statement of its own (``finish_alone``): the reservation
    it held still comes back with its end and is settled to the tokens used, once."""
    key = await _program_key(run_client, auth)
    body = {"model": "parley-fake", "messages": [{"role": "user", "content": "hi"}]}
    for n in (1, 2):
        r = await run_client.post(
            "/v1/chat/completions", json={**body, "max_tokens": 50}, headers=key
        )
        assert r.status_code == 200, r.text
        used = r.json()["usage"]["total_tokens"]
        assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - n * used


@pytest.mark.parametrize("run_overrides", [tier(10_000)])
async def test_a_programs_end_and_a_reservation_taken_meanwhile_get_it_once(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    """A worker's one-statement end (the row locked in a sub-select) while another holds
    the run's row to take its reservation: the end waits, and the reservation is had once."""
    worker = run_services.worker
    assert worker is not None
    await worker.stop(grace=0)  # the run stays queued, holding its reservation
    key = await _program_key(run_client, auth)
    body = {"model": "parley-fake", "messages": [{"role": "user", "content": "hold"}]}
    sent = asyncio.create_task(
        run_client.post("/v1/chat/completions", json={**body, "max_tokens": 100}, headers=key)
    )
    run_id = await eventually(lambda: _queued_run(run_services), "the run to be made")
    async with run_services.db.alone() as conn:
        claimed = await run_store.claim(
            conn, run_id=run_id, worker_id="w1", lease=timedelta(seconds=30)
        )
    assert claimed is not None and claimed.reserved_tokens is not None
    done = run_ends.Outcome(status=RunStatus.COMPLETED, content="x", completion_tokens=1)

    async def end() -> run_ends.Finished | None:
        async with run_services.db.alone() as conn:
            return await run_ends.finish_alone(
                conn, run_id=run_id, outcome=done, from_status=RunStatus.RUNNING, worker_id="w1"
            )

    locked = asyncio.Event()

    async def take() -> int | None:  # the row locked first, then a pause before it clears
        async with run_services.db.transaction() as s:
            await s.scalar(select(Run.reserved_tokens).where(Run.id == run_id).with_for_update())
            locked.set()
            await asyncio.sleep(0.3)
            return await run_store.take_reservation(s, run_id=run_id)

    taking = asyncio.create_task(take())
    await locked.wait()
    ended = await end()  # meanwhile
    assert ended is not None  # (a take changes no state: the end happens)
    got = [await taking, ended.reserved_tokens]
    assert got == [claimed.reserved_tokens, None]
    sent.cancel()
    with contextlib.suppress(BaseException):
        await sent


async def _queued_run(svc: Services) -> str | None:
    async with svc.db.transaction() as s:
        found = await s.scalar(select(Run.id).where(Run.status == RunStatus.QUEUED))
    return found
