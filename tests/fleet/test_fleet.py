"""parley in front of a fleet of `parley engine serve` replicas: streaming, stop, affinity,
bounded load, health and retries, all over real processes and sockets."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import httpx

from parley.engines.fake import fake_text
from parley.engines.interface import ChatMessage
from tests.fleet.conftest import Fleet, Front, chat_homed_on
from tests.fleet.servers import EngineReplica, Misbehaving
from tests.runs.helpers import send_json, stored_message, wait_run
from tests.sse import collect, text_of
from tests.waiting import eventually

Replicas = Callable[..., list[EngineReplica]]


async def _turn(front: Front, chat_id: str, content: str = "hello") -> dict[str, object]:
    sent = await send_json(front.client, front.auth, chat_id, content)
    return await wait_run(front.client, front.auth, sent["run_id"])


def _total_in_flight(replicas: list[EngineReplica], n: int) -> bool:
    return sum(r.in_flight() for r in replicas) == n


def _served(replicas: list[EngineReplica]) -> list[int]:
    return [r.served() for r in replicas]


async def test_an_answer_streams_from_a_replica_with_its_usage(
    fleet: Fleet, replicas: Replicas
) -> None:
    fleet_replicas = replicas(2)
    async with fleet([r.url for r in fleet_replicas]) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        async with front.client.stream(
            "POST",
            f"/api/chats/{chat_id}/messages",
            json={"content": "tell me about rivers"},
            headers=front.auth,
        ) as response:
            assert response.status_code == 200
            evs = await collect(response)
        words = fake_text([ChatMessage("user", "tell me about rivers")], 12)
        assert text_of(evs) == "".join(words)
        # chunks that arrive together are relayed as one delta, each counting its tokens
        assert sum(e.data["tokens"] for e in evs if e.event == "delta") == len(words)
        assert evs[-1].event == "done"
        run_id = next(e.data["run_id"] for e in evs if e.event == "status")
        run = await wait_run(front.client, front.auth, run_id)
        assert run["status"] == "completed"
        assert run["finish_reason"] == "stop"
        # the upstream's usage: its own prompt count (the fake engine's: words + 4 a message)
        assert run["usage"]["prompt_tokens"] == 4 + 4
        assert run["usage"]["completion_tokens"] == 12
        assert sum(_served(fleet_replicas)) == 1


async def test_a_stop_frees_the_replicas_slot_within_a_second(
    fleet: Fleet, replicas: Replicas
) -> None:
    (replica,) = replicas(1, inter_token_latency_ms=50, output_tokens=400)
    async with fleet([replica.url]) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(front.client, front.auth, chat_id)

        async def generating() -> bool:
            run = (await front.client.get(f"/api/runs/{sent['run_id']}", headers=front.auth)).json()
            return run["status"] == "running" and replica.in_flight() == 1

        await eventually(generating, "the replica to be generating the answer")
        r = await front.client.post(
            f"/api/chats/{chat_id}/runs/{sent['run_id']}/cancel", headers=front.auth
        )
        assert r.status_code == 200
        # 400 tokens at 50 ms would take 20 s: a free slot now is the stop reaching it
        await eventually(
            lambda: asyncio.to_thread(lambda: replica.in_flight() == 0),
            "the replica's in-flight count to drop after the stop",
            timeout=1.0,
        )
        run = await wait_run(front.client, front.auth, sent["run_id"])
        assert run["status"] == "cancelled"


async def test_every_turn_of_a_chat_goes_to_its_replica(fleet: Fleet, replicas: Replicas) -> None:
    fleet_replicas = replicas(3)
    async with fleet([r.url for r in fleet_replicas]) as front:
        for _ in range(4):
            r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
            chat_id = r.json()["id"]
            home = front.router.home(chat_id)
            assert home is not None
            where: set[int] = set()
            for turn in range(3):
                before = _served(fleet_replicas)
                run = await _turn(front, chat_id, f"turn {turn}")
                assert run["status"] == "completed", run
                after = _served(fleet_replicas)
                (moved,) = [i for i in range(3) if after[i] != before[i]]
                where.add(moved)
            assert where == {[r.url for r in fleet_replicas].index(home.engine.base_url)}


async def test_bounded_load_moves_the_excess_along_the_ring(
    fleet: Fleet, replicas: Replicas
) -> None:
    fleet_replicas = replicas(3, inter_token_latency_ms=50, output_tokens=400)
    home = fleet_replicas[0]
    async with fleet([r.url for r in fleet_replicas]) as front:
        chats = [await chat_homed_on(front, home.url) for _ in range(9)]
        runs = []
        for chat_id in chats:  # one after another, as a busy hour brings them
            runs.append((chat_id, (await send_json(front.client, front.auth, chat_id))["run_id"]))
            await eventually(
                lambda: asyncio.to_thread(_total_in_flight, fleet_replicas, len(runs)),
                f"{len(runs)} answers in flight",
            )
        loads = [r.in_flight() for r in fleet_replicas]
        bound = math.ceil(1.25 * 9 / 3)
        assert max(loads) <= bound, loads
        assert loads[0] == bound, loads  # the chats' own replica is filled to its bound
        assert sum(loads[1:]) == 9 - bound
        for chat_id, run_id in runs:
            await front.client.post(
                f"/api/chats/{chat_id}/runs/{run_id}/cancel", headers=front.auth
            )


async def test_a_dead_replica_leaves_the_ring_and_returns_when_it_answers_again(
    fleet: Fleet, replicas: Replicas
) -> None:
    fleet_replicas = replicas(3)
    dead = fleet_replicas[1]
    async with fleet([r.url for r in fleet_replicas]) as front:
        chat_id = await chat_homed_on(front, dead.url)
        assert (await _turn(front, chat_id))["status"] == "completed"
        dead.kill()

        def healthy() -> list[bool]:
            return [s.healthy for s in front.router.states()]

        await eventually(
            lambda: asyncio.sleep(0, not healthy()[1]), "the dead replica to leave the ring"
        )
        others = [fleet_replicas[0], fleet_replicas[2]]
        before = _served(others)
        run = await _turn(front, chat_id)
        assert run["status"] == "completed", run  # its chats remapped
        assert sum(_served(others)) == sum(before) + 1

        dead.start()  # back, on the same port
        await eventually(
            lambda: asyncio.sleep(0, healthy()[1]), "the replica to return to the ring"
        )
        assert dead.served() == 0
        run = await _turn(front, chat_id)
        assert run["status"] == "completed", run
        assert dead.served() == 1  # the chat came home


async def test_a_failure_before_the_first_token_is_retried_on_the_next_replica(
    fleet: Fleet, replicas: Replicas, misbehaving: Callable[[str], Misbehaving]
) -> None:
    broken = misbehaving("error500")
    (good,) = replicas(1)
    # a high threshold: the broken replica stays on the ring, so every run meets it first
    async with fleet([broken.url, good.url], failure_threshold=100) as front:
        for n in range(1, 4):
            chat_id = await chat_homed_on(front, broken.url)
            run = await _turn(front, chat_id)
            assert run["status"] == "completed", run
            assert broken.requests() == n
            assert good.served() == n


async def test_nothing_is_retried_after_the_first_token(
    fleet: Fleet, replicas: Replicas, misbehaving: Callable[[str], Misbehaving]
) -> None:
    broken = misbehaving("cut")
    (good,) = replicas(1)
    async with fleet([broken.url, good.url], failure_threshold=100) as front:
        chat_id = await chat_homed_on(front, broken.url)
        sent = await send_json(front.client, front.auth, chat_id)
        run = await wait_run(front.client, front.auth, sent["run_id"])
        assert run["status"] == "failed"
        assert run["error"]["code"] == "upstream_failed"
        message = await stored_message(front.client, front.auth, chat_id, sent["message_id"])
        assert message["content"] == "Hello world"  # the partial answer is kept
        assert broken.requests() == 1
        assert good.served() == 0


async def test_the_router_counts_in_flight_what_the_replicas_report(
    fleet: Fleet, replicas: Replicas
) -> None:
    """The router's own count of the runs it sent each replica equals what each replica's
    /health reports. (It keeps its own count: it does not read the replicas' load, so load a
    replica takes from elsewhere, another front or a direct client, is not seen.)"""
    fleet_replicas = replicas(2, inter_token_latency_ms=50, output_tokens=400)
    async with fleet([r.url for r in fleet_replicas]) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(front.client, front.auth, chat_id)
        await eventually(
            lambda: asyncio.to_thread(_total_in_flight, fleet_replicas, 1),
            "the answer in flight",
        )
        states = front.router.states()
        assert [s.in_flight for s in states] == [r.in_flight() for r in fleet_replicas]
        assert front.router.slots == 16
        await front.client.post(
            f"/api/chats/{chat_id}/runs/{sent['run_id']}/cancel", headers=front.auth
        )
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"{fleet_replicas[0].base}/health")).status_code == 200


async def test_a_fleet_model_and_the_local_one_serve_side_by_side(
    fleet: Fleet, replicas: Replicas
) -> None:
    (replica,) = replicas(1)
    local = {"name": "parley-fake", "engine": "fake"}
    async with fleet([replica.url], extra_models=[local]) as front:
        listed = (await front.client.get("/api/models", headers=front.auth)).json()["data"]
        assert [(m["id"], m["engine"]) for m in listed] == [
            ("fleet", "openai"),
            ("parley-fake", "fake"),
        ]
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        for model, served in (("fleet", 1), ("parley-fake", 1), ("fleet", 2)):
            sent = await send_json(front.client, front.auth, chat_id, "hi", model=model)
            run = await wait_run(front.client, front.auth, sent["run_id"])
            assert (run["status"], run["model"]) == ("completed", model), run
            assert replica.served() == served
