"""Calls that wait for the user's yes (issue 43): a tool the operator marked asks first (a
``tool_confirm`` event); allowed, the call runs; declined, or unanswered in time, it is
not made and the answer goes on; only the run's owner answers, and only while it runs.
The fake engine scripts the calls. Both stacks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.builders import ROOMY_TIERS
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, wait_run
from tests.sse import Event, events

CALL = '/call search_chats {"query": "heron"}'


# long enough that a loaded CI machine's answer comes within it (2 s once did not)
WINDOW = 5


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "tiers": ROOMY_TIERS,
        "default_tier": "free",
        "tools": {"confirm": ["search_chats"], "confirm_seconds": WINDOW},
    }


async def _answered(
    client: httpx.AsyncClient, auth: dict[str, str], approve: bool | None
) -> tuple[list[Event], str]:
    """Send the call; answer its confirmation (None: leave it unanswered); the events."""
    chat = await new_chat(client, auth)
    body = {"content": CALL, "tools": ["search_chats"]}
    seen: list[Event] = []
    async with client.stream(
        "POST", f"/api/chats/{chat}/messages", json=body, headers=auth
    ) as stream:
        async for event in events(stream):
            seen.append(event)
            if event.event == "tool_confirm" and approve is not None:
                run_id = seen[0].data["run_id"]
                r = await client.post(
                    f"/api/runs/{run_id}/tool-calls/{event.data['id']}",
                    json={"approve": approve},
                    headers=auth,
                )
                assert r.status_code == 202, r.text
            if event.event == "done":
                break
    return seen, seen[0].data["run_id"]


def _result(seen: list[Event]) -> dict[str, Any]:
    (result,) = [e.data for e in seen if e.event == "tool_result"]
    return result


async def test_an_allowed_call_runs(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    seen, _ = await _answered(run_client, auth, True)
    kinds = [e.event for e in seen]
    assert kinds.index("tool_confirm") < kinds.index("tool_answer") < kinds.index("tool_result")
    confirm = next(e.data for e in seen if e.event == "tool_confirm")
    assert (confirm["name"], confirm["arguments"], confirm["seconds"]) == (
        "search_chats",
        '{"query": "heron"}',
        WINDOW,
    )
    assert _result(seen)["status"] == "ok"


@pytest.mark.parametrize(
    ("approve", "said"),
    [(False, "did not allow"), (None, f"did not answer within {WINDOW} s")],
    ids=["declined", "unanswered"],
)
async def test_a_call_not_allowed_is_not_made_and_the_answer_goes_on(
    run_client: httpx.AsyncClient, approve: bool | None, said: str
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    seen, run_id = await _answered(run_client, auth, approve)
    result = _result(seen)
    assert result["status"] == "refused" and said in result["preview"]
    run = await wait_run(run_client, auth, run_id)
    assert run["status"] == "completed"
    assert seen[-1].event == "done"


async def test_only_the_owner_answers_and_only_while_it_runs(run_client: httpx.AsyncClient) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    _, run_id = await _answered(run_client, ada, True)
    url = f"/api/runs/{run_id}/tool-calls/call_x"
    assert_error(await run_client.post(url, json={"approve": True}, headers=bob), 404)
    ended = await run_client.post(url, json={"approve": True}, headers=ada)
    assert_error(ended, 409, "run_not_running")
    assert_error(await run_client.post(url, json={"approve": "yes"}, headers=ada), 422)
