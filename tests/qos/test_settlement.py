"""A run whose worker died mid-answer is failed by the sweeper and charged what it used:
its prompt (counted when the worker claimed it) and the tokens it streamed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.services import Services
from tests.qos.test_budget import budget, estimate, follow, tier
from tests.runs.helpers import new_chat, send_json, stored_message
from tests.waiting import eventually


@pytest.mark.parametrize(
    "run_overrides",
    [tier(10_000, fake_engine={"time_to_first_token_ms": 5, "inter_token_latency_ms": 300})],
)
async def test_a_run_the_sweeper_fails_is_charged_prompt_and_completion(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    worker = run_services.worker
    assert worker is not None
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id, "tell me a story", max_tokens=100)
    run_id = accepted["run_id"]

    async def two_deltas() -> list[Any]:
        entries = await run_services.bus.read(run_id, None, timeout=0)
        deltas = [e for e in entries if e.event.kind == "delta"]
        return deltas if len(deltas) >= 2 else []

    await eventually(two_deltas, "two tokens of the answer")
    await worker.stop(grace=0)  # the worker dies: nothing settles the run but the sweeper
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - estimate(
        "tell me a story", 100
    )
    done = await follow(run_client, auth, run_id)
    assert done.data["status"] == "failed"
    usage = done.data["usage"]
    # the fake engine counts a prompt as its words + 4 per message: one message of 4 words
    assert usage["prompt_tokens"] == 8
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert usage["completion_tokens"] == len(message["content"].split()) >= 2
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert (await budget(run_client, auth))["remaining_tokens"] == 10_000 - usage["total_tokens"]
