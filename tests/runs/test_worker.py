"""The worker through HTTP: it streams the answer, stores it, and the history is the next prompt."""

from __future__ import annotations

import httpx
from pydantic import BaseModel

from parley.api.run_schemas import DeltaEventData, DoneEventData, ErrorEventData, StatusEventData
from parley.services import Services
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import collect, text_of


async def test_send_streams_the_answer_and_stores_it(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi there"}, headers=auth
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        evs = await collect(r)
    payloads: dict[str, type[BaseModel]] = {
        "status": StatusEventData,
        "delta": DeltaEventData,
        "error": ErrorEventData,
        "done": DoneEventData,
    }
    for e in evs:  # every event matches its documented payload
        payloads[e.event].model_validate(e.data, strict=False)
    kinds = [e.event for e in evs]
    assert kinds[:2] == ["status", "status"]
    assert [e.data["status"] for e in evs[:2]] == ["queued", "running"]
    assert kinds[-1] == "done"
    assert kinds.count("delta") == 24
    ids = [e.id for e in evs]
    assert len(set(ids)) == len(ids)
    done = evs[-1].data
    assert done["status"] == "completed"
    assert done["usage"]["completion_tokens"] == 24
    assert done["usage"]["prompt_tokens"] > 0
    message = await stored_message(run_client, auth, chat_id, done["message_id"])
    assert message["content"] == text_of(evs)
    assert message["status"] == "completed"
    assert message["role"] == "assistant"
    assert message["token_count"] == 24
    run = (await run_client.get(f"/api/runs/{done['run_id']}", headers=auth)).json()
    assert run["status"] == "completed"
    assert run["finish_reason"] == "stop"
    assert run["usage"] == done["usage"]
    history = (
        await run_client.get(
            f"/api/chats/{chat_id}/messages", params={"order": "asc"}, headers=auth
        )
    ).json()["data"]
    assert [(m["role"], m["status"]) for m in history] == [
        ("user", "completed"),
        ("assistant", "completed"),
    ]
    assert history[0]["content"] == "hi there"


async def test_history_is_the_prompt_of_the_next_turn(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_services: Services
) -> None:
    chat_id = await new_chat(run_client, auth)
    first = await send_json(run_client, auth, chat_id, "one")
    await wait_run(run_client, auth, first["run_id"])
    second = await send_json(run_client, auth, chat_id, "two")
    run = await wait_run(run_client, auth, second["run_id"])
    # prompt tokens of the fake engine grow with the history: user, assistant, user
    assert run["usage"]["prompt_tokens"] > 24
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert chats[0]["message_count"] == 4
