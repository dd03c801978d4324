"""A tier with a downgrade model: when the model asked for is too busy for the tier, the run
is served by the downgrade model instead of being refused, and the run says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.engines.fake import FAKE_MODEL
from parley.services import Services
from tests.fleet.servers import EngineReplica
from tests.helpers import assert_error
from tests.observability.test_metrics import scrape, total
from tests.qos.test_admission import ROOMY, on_tier, post, slots_offered
from tests.runs.helpers import new_chat, stored_message, wait_run
from tests.sse import collect

pytestmark = pytest.mark.slow

BIG = "big"
TIERS = {
    "free": {
        **ROOMY,
        "priority": 0,
        "max_concurrent_runs": 100,
        "max_load": 1.0,
        "downgrade_model": FAKE_MODEL,
    },
    "pro": {**ROOMY, "priority": 2, "max_concurrent_runs": 100},
}


@pytest.fixture(scope="module")
def big_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineReplica]:
    """The big model's one server: answers slowly (6 s to the first token)."""
    replica = EngineReplica(tmp_path_factory.mktemp("big"), "big", time_to_first_token_ms=6000)
    yield replica
    replica.stop()


@pytest.fixture
def run_overrides(big_replica: EngineReplica, tmp_path: Path) -> dict[str, Any]:
    return {
        "tiers": TIERS,
        "default_tier": "free",
        "models": [
            {
                "name": BIG,
                "engine": "openai",
                "upstream_model": FAKE_MODEL,
                "replicas": [{"base_url": big_replica.url, "slots": 2}],
            },
            {"name": FAKE_MODEL, "engine": "fake"},
        ],
        "fake_engine": {"time_to_first_token_ms": 4000, "inter_token_latency_ms": 1, "slots": 1},
    }


async def send_to(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, model: str
) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hi", "model": model},
        headers={**auth, "Accept": "application/json"},
    )


async def test_a_busy_model_serves_a_tier_by_its_downgrade_model(
    run_client: httpx.AsyncClient, run_services: Services, big_replica: EngineReplica
) -> None:
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    await slots_offered(run_services, 2, BIG)
    await slots_offered(run_services, 1, FAKE_MODEL)
    pro_chat, free_chat = await new_chat(run_client, pro), await new_chat(run_client, free)
    served_before = big_replica.served()
    pro_runs = [await send_to(run_client, pro, pro_chat, BIG) for _ in range(2)]
    assert [r.status_code for r in pro_runs] == [202, 202]  # the big model's load is 1.0
    before = await scrape(run_client)
    r = await send_to(run_client, free, free_chat, BIG)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert (accepted["model"], accepted["downgraded_from"]) == (FAKE_MODEL, BIG)
    run = await wait_run(run_client, free, accepted["run_id"])
    assert (run["status"], run["model"], run["downgraded_from"]) == ("completed", FAKE_MODEL, BIG)
    stored = await stored_message(run_client, free, free_chat, accepted["message_id"])
    assert (stored["model"], stored["downgraded_from"]) == (FAKE_MODEL, BIG)
    for r in pro_runs:
        await wait_run(run_client, pro, r.json()["run_id"])
    assert big_replica.served() == served_before + 2  # the pro runs', not the downgraded one
    after = await scrape(run_client)
    name = "parley_runs_downgraded_total"
    labels = {"tier": "free", "requested_model": BIG, "model": FAKE_MODEL}
    assert total(after, name, **labels) - total(before, name, **labels) == 1
    # the stream's first event says so too (the web UI shows it)
    async with run_client.stream(
        "GET", f"/api/runs/{accepted['run_id']}/events", headers=free
    ) as stream:
        first = (await collect(stream))[0]
    assert first.data == {
        "run_id": accepted["run_id"],
        "status": "queued",
        "model": FAKE_MODEL,
        "downgraded_from": BIG,
    }


async def test_with_the_downgrade_model_busy_too_the_run_is_refused(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    await slots_offered(run_services, 2, BIG)
    await slots_offered(run_services, 1, FAKE_MODEL)
    pro_chat, free_chat = await new_chat(run_client, pro), await new_chat(run_client, free)
    for _ in range(2):
        assert (await send_to(run_client, pro, pro_chat, BIG)).status_code == 202
    slow = {"content": "hi", "model": FAKE_MODEL, "max_tokens": 100}
    r = await run_client.post(
        f"/api/chats/{pro_chat}/messages",
        json=slow,
        headers={**pro, "Accept": "application/json"},
    )
    assert r.status_code == 202  # the downgrade model's one slot
    assert_error(await send_to(run_client, free, free_chat, BIG), 503, "server_overloaded")
    assert (await post(run_client, pro, pro_chat)).status_code == 202  # pro: never shed


async def test_a_program_run_the_downgrade_model_cannot_serve_is_refused_not_downgraded(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """Tools (or a sampling parameter, a format) the downgrade model's engine cannot honour:
    a busy model's run is refused (503) instead of being served without them."""
    free = await on_tier(run_client, run_services, "free@example.com", "free")
    pro = await on_tier(run_client, run_services, "pro@example.com", "pro")
    await slots_offered(run_services, 2, BIG)
    await slots_offered(run_services, 1, FAKE_MODEL)
    pro_chat = await new_chat(run_client, pro)
    for _ in range(2):
        assert (await send_to(run_client, pro, pro_chat, BIG)).status_code == 202
    key = (await run_client.post("/api/keys", json={"name": "k"}, headers=free)).json()["key"]
    asked: dict[str, Any] = {"model": BIG, "messages": [{"role": "user", "content": "hi"}]}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    bearer = {"Authorization": f"Bearer {key}"}
    with_tools = await run_client.post(
        "/v1/chat/completions", json={**asked, "tools": [tool]}, headers=bearer
    )
    assert with_tools.status_code == 503, with_tools.text
    assert with_tools.json()["error"]["code"] == "server_overloaded"
    plain = await run_client.post("/v1/chat/completions", json=asked, headers=bearer)
    assert plain.status_code == 200, plain.text  # the same request without them: downgraded
    assert plain.json()["model"] == FAKE_MODEL
