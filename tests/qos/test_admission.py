"""Admission under load, through HTTP on both stacks (SQLite + the in-process bus, Postgres
+ Redis): per-user concurrency, shedding by tier as load rises, back-off guidance."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from parley import logs
from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.services import Services
from parley.store import users
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import JSON, new_chat, send_json, wait_run
from tests.sse import collect
from tests.waiting import eventually

ROOMY = {"tokens_per_minute": 1_000_000, "burst_tokens": 1_000_000, "max_output_tokens": 100}
EXPONENTIAL = {"strategy": "exponential", "base_seconds": 2, "max_seconds": 60, "jitter": True}
LINEAR = {"strategy": "linear", "base_seconds": 1, "max_seconds": 20, "jitter": False}
TIERS: dict[str, dict[str, Any]] = {
    "free": {**ROOMY, "priority": 0, "max_concurrent_runs": 100, "max_load": 1.0},
    "plus": {**ROOMY, "priority": 1, "max_concurrent_runs": 100, "max_load": 2.0},
    "pro": {**ROOMY, "priority": 2, "max_concurrent_runs": 100},
    "solo": {**ROOMY, "priority": 0, "max_concurrent_runs": 3},
}
TIERS["free"]["backoff"] = EXPONENTIAL
TIERS["plus"]["backoff"] = LINEAR
# runs that hold their slots for 5 s: longer than any test here takes to look, even on a
# loaded machine (a run that ends early would change the load a test is reading)
SLOW = {"time_to_first_token_ms": 5000, "inter_token_latency_ms": 1, "output_tokens": 2}


def settings(**more: Any) -> dict[str, Any]:
    return {"tiers": TIERS, "default_tier": "free", "fake_engine": {**SLOW, "slots": 4}, **more}


async def on_tier(
    client: httpx.AsyncClient, svc: Services, email: str, tier: str
) -> dict[str, str]:
    """A new user on ``tier`` (a session: not cached, so the tier holds at once)."""
    auth = await user_headers(client, email)
    async with svc.db.transaction() as s:
        user = await users.find_user_by_email(s, email)
        assert user is not None
        await users.set_tier(s, user, tier)
    return auth


async def post(client: httpx.AsyncClient, auth: dict[str, str], chat_id: str) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers={**auth, **JSON}
    )


async def slots_offered(svc: Services, slots: int, model: str = FAKE_MODEL) -> None:
    async def offered() -> bool:
        return (await svc.bus.model_load(model, window=30)).slots == slots

    await eventually(offered, f"the worker to offer its {slots} slots")


@pytest.mark.parametrize("run_overrides", [settings()])
async def test_a_user_runs_exactly_as_many_at_once_as_the_tier_allows(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """100 concurrent sends of one user whose tier allows 3 runs at once: exactly 3 are
    made, the rest refused (429 too_many_runs, with when and how to retry); the slots come
    back when the runs end, however they end (cancelled here)."""
    auth = await on_tier(run_client, run_services, "ada@example.com", "solo")
    chats = [await new_chat(run_client, auth) for _ in range(100)]
    answers = await asyncio.gather(*(post(run_client, auth, c) for c in chats))
    made = [r for r in answers if r.status_code == 202]
    assert len(made) == 3, [r.text for r in answers if r.status_code != 429]
    for r in answers:
        if r.status_code != 202:
            error = assert_error(r, 429, "too_many_runs")
            assert "3 runs queued or running" in error["message"]
            assert error["backoff"]["strategy"] == "linear"  # the tier's default back-off
    for r in made:  # to its `done`, which comes after its slot is given back (not before,
        # as its stored status does)
        assert (await ended(run_client, auth, r.json()["run_id"]))["status"] == "completed"
    again = [await post(run_client, auth, c) for c in chats[:3]]
    assert [r.status_code for r in again] == [202] * 3  # the slots came back
    assert_error(await post(run_client, auth, chats[3]), 429, "too_many_runs")
    first = again[0].json()
    r = await run_client.post(f"/api/runs/{first['run_id']}/cancel", headers=auth)
    assert r.status_code == 200, r.text
    assert (await ended(run_client, auth, first["run_id"]))["status"] == "cancelled"
    assert (await post(run_client, auth, chats[4])).status_code == 202


async def ended(client: httpx.AsyncClient, auth: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run's ``done`` event's data, read from its stream as a client would."""
    async with client.stream("GET", f"/api/runs/{run_id}/events", headers=auth) as r:
        events = await collect(r)
    assert events[-1].event == "done", events
    return events[-1].data


@pytest.mark.parametrize("run_overrides", [settings()])
async def test_a_retry_with_its_key_shares_its_first_runs_slot(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await on_tier(run_client, run_services, "ada@example.com", "solo")
    chat_id = await new_chat(run_client, auth)
    keyed = {**auth, **JSON, "Idempotency-Key": "k1"}
    url = f"/api/chats/{chat_id}/messages"
    sent = await asyncio.gather(
        *(run_client.post(url, json={"content": "hi"}, headers=keyed) for _ in range(20))
    )
    assert {r.status_code for r in sent} == {202}
    assert len({r.json()["run_id"] for r in sent}) == 1
    others = [await post(run_client, auth, await new_chat(run_client, auth)) for _ in range(3)]
    assert [r.status_code for r in others] == [202, 202, 429]  # the 20 took one slot


@pytest.mark.parametrize("run_overrides", [settings(queue_max=6)])
async def test_as_load_rises_free_is_refused_first_then_plus_and_pro_only_when_the_queue_is_full(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """4 slots; free is served up to a load of 1.0, plus 2.0, pro until the queue is full."""
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    plus = await on_tier(run_client, run_services, "plus@example.com", "plus")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    chat = {
        who: await new_chat(run_client, auth)
        for who, auth in (("free", free), ("plus", plus), ("pro", pro))
    }
    await slots_offered(run_services, 4)
    for _ in range(3):
        assert (await post(run_client, free, chat["free"])).status_code == 202
    for _ in range(1):
        assert (await post(run_client, pro, chat["pro"])).status_code == 202  # load 1.0
    shed = assert_error(await post(run_client, free, chat["free"]), 503, "server_overloaded")
    assert "100% of its capacity" in shed["message"] and "free tier" in shed["message"]
    assert shed["backoff"] == EXPONENTIAL
    for _ in range(4):  # plus: up to a load of 2.0 (4 in flight, 4 queued)
        assert (await post(run_client, plus, chat["plus"])).status_code == 202
    shed = assert_error(await post(run_client, plus, chat["plus"]), 503, "server_overloaded")
    assert shed["backoff"] == LINEAR
    assert_error(await post(run_client, free, chat["free"]), 503, "server_overloaded")
    for _ in range(2):  # pro: until the queue (6) is full
        assert (await post(run_client, pro, chat["pro"])).status_code == 202
    full = assert_error(await post(run_client, pro, chat["pro"]), 503, "queue_full")
    assert full["retry_after"] == 1  # nothing drained yet: pro's first back-off (linear, 1 s)
    load = await run_services.bus.model_load(FAKE_MODEL, window=30)
    assert (load.in_flight, load.slots) == (10, 4)


@pytest.mark.parametrize("run_overrides", [settings()])
async def test_shedding_is_decided_on_the_bus_alone(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """A refusal for load runs no SQL at all (nor does a refusal for too many runs)."""
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    chat = await new_chat(run_client, pro)
    await slots_offered(run_services, 4)
    for _ in range(4):
        assert (await post(run_client, pro, chat)).status_code == 202
    free_chat = await new_chat(run_client, free)
    statements: list[tuple[str | None, str]] = []  # (the request's id, SQL)

    def count(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        statements.append((logs.bound().get("request_id"), sql))

    engine = run_services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        r = await run_client.post(
            f"/api/chats/{free_chat}/messages",
            json={"content": "hi"},
            headers={**free, **JSON},
        )
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert_error(r, 503, "server_overloaded")
    # the session's check is all it reads (an API key's is cached: then nothing at all);
    # the sweeper's and the worker's statements meanwhile are no part of the request
    ours = [sql for rid, sql in statements if rid == r.headers["x-request-id"]]
    reads = [sql for sql in ours if not sql.startswith(("BEGIN", "COMMIT"))]
    assert reads and all("FROM sessions" in sql or "FROM users" in sql for sql in reads), reads
    assert not any(table in sql for sql in reads for table in ("runs", "chats", "messages"))


@pytest.mark.parametrize("run_overrides", [settings()])
async def test_retry_after_follows_the_drain_rate(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """With runs ending lately, Retry-After is the wait for enough of them to end to make
    room, at the rate they have been ending; before any ended, the tier's first back-off."""
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    chat = await new_chat(run_client, pro)
    free_chat = await new_chat(run_client, free)
    await slots_offered(run_services, 4)
    sent = [await post(run_client, pro, chat) for _ in range(4)]
    early = assert_error(await post(run_client, free, free_chat), 503, "server_overloaded")
    assert early["retry_after"] == 2  # nothing drained yet: the free tier's base back-off
    for r in sent:
        await wait_run(run_client, pro, r.json()["run_id"])
    for _ in range(12):  # 12 more in flight: 8 queued behind 4 running; 4 drained lately
        assert (await post(run_client, pro, chat)).status_code == 202
    late = assert_error(await post(run_client, free, free_chat), 503, "server_overloaded")
    load = await run_services.bus.model_load(FAKE_MODEL, window=30)
    # 12 in flight, room for one more at 3: 10 must end, at the rate the 4 ended
    assert load.drained >= 4 and load.in_flight >= 8
    expected = (load.in_flight + 1 - 4) / load.drain_rate
    assert abs(late["retry_after"] - math.ceil(min(expected, 60))) <= 1, (late, load)


def test_retry_after_is_the_excess_over_the_drain_rate() -> None:
    from parley.bus.interface import ModelLoad
    from parley.qos.admission import retry_after

    busy = ModelLoad(in_flight=20, slots=10, drained=30, window=60, span=30)  # 1 run/s
    assert retry_after(busy, 1.0, fallback=5) == 11  # 11 must end to fit one more
    assert retry_after(busy, 2.0, fallback=5) == 1  # room already (never below 1 s)
    assert retry_after(ModelLoad(20, 10, 0, 30), 1.0, fallback=5) == 5  # nothing drained
    just_busy = ModelLoad(in_flight=20, slots=10, drained=4, window=60, span=2)  # 2 runs/s
    assert retry_after(just_busy, 1.0, fallback=5) == 5.5  # not 4 in 60 s: 2.5 minutes


@pytest.mark.parametrize("run_overrides", [settings()])
async def test_a_user_on_an_unlimited_tier_is_never_shed(
    run_client: httpx.AsyncClient, run_services: Services, auth: dict[str, str]
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    await slots_offered(run_services, 4)
    chat = await new_chat(run_client, pro)
    for _ in range(8):
        body = await send_json(run_client, pro, chat)
        assert body["model"] == FAKE_MODEL and body["downgraded_from"] is None


def empty_polls(services: Services, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, counts (in the list's one item) the worker's looks at the queue that
    found nothing it may take."""
    bus = services.bus
    dequeue = bus.dequeue
    count = [0]

    async def counted(*args: Any, **kw: Any) -> Any:
        item = await dequeue(*args, **kw)
        if item is None:
            count[0] += 1
        return item

    monkeypatch.setattr(bus, "dequeue", counted)
    return count


RESERVE_TIERS = {"free": {**TIERS["free"], "max_load": None}, "pro": TIERS["pro"]}


# runs long enough (8 s) that no slot frees while the test looks, however loaded the machine
LONG = {**SLOW, "time_to_first_token_ms": 8000, "slots": 4}


@pytest.mark.parametrize(
    "run_overrides", [settings(tiers=RESERVE_TIERS, reserved_slots=1, fake_engine=LONG)]
)
async def test_the_top_tier_finds_its_reserved_slot_free(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 slots, 1 reserved: free runs take 3 and queue behind them; a pro run starts at
    once in the fourth (handed off or dequeued alike); the next pro run waits for a slot."""
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    free_chat, pro_chat = await new_chat(run_client, free), await new_chat(run_client, pro)
    for _ in range(6):
        assert (await post(run_client, free, free_chat)).status_code == 202

    async def three_busy() -> bool:
        return engine.busy_slots == 3

    await eventually(three_busy, "free runs in 3 of the 4 slots")
    polls = empty_polls(run_services, monkeypatch)

    async def looked_twice() -> bool:  # in the reserve: top-tier runs only, none there
        return polls[0] >= 2

    await eventually(looked_twice, "the worker to look at the queue twice with the slot free")
    assert engine.busy_slots == 3  # and it took no free run: the fourth is kept
    assert await run_services.bus.queue_length() == 3
    top = (await post(run_client, pro, pro_chat)).json()["run_id"]

    async def started(run_id: str) -> bool:
        run = (await run_client.get(f"/api/runs/{run_id}", headers=pro)).json()
        return bool(run["status"] == "running")

    async def top_started() -> bool:
        return await started(top)

    await eventually(top_started, "the pro run to start in the reserved slot")

    async def four_busy() -> bool:  # (running from its claim, in the engine once prompted)
        return engine.busy_slots == 4

    await eventually(four_busy, "the pro run in the fourth slot")
    second = (await post(run_client, pro, pro_chat)).json()["run_id"]
    assert run_services.worker is not None
    assert run_services.worker.free_slots == 0  # every slot held: nothing more is claimed
    assert not await started(second)
    assert engine.busy_slots == 4
    assert await run_services.bus.queue_length() == 4  # 3 free runs and the second pro
