"""Text a model generates that a database cannot keep never leaves a run running.

A model can emit a NUL character (a byte token ``<0x00>``) and an upstream's JSON can spell a
lone surrogate: Postgres refuses both. The stream and the stored answer carry the same text,
without them. An end the database refuses for any other reason is not retried by the worker
(retrying cannot help): the run's lease lapses, and the sweeper, refused the streamed text as
well, ends the run failed without it: nothing is left running.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.exc import DataError

from parley.store import run_ends
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import collect, text_of

ANSWER = "one\x00 two \ud800three four\x00"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"fake_engine": {"answer": ANSWER}, "lease_seconds": 1}


async def test_a_nul_or_lone_surrogate_in_the_answer_is_dropped_from_stream_and_store(
    run_client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await new_chat(run_client, auth)
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers=auth
    ) as r:
        events = await collect(r)
    done = events[-1]
    assert done.event == "done", events
    assert done.data["status"] == "completed"
    streamed = text_of(events)
    assert streamed == "one two \ufffdthree four"
    message = await stored_message(run_client, auth, chat_id, done.data["message_id"])
    assert message["content"] == streamed
    assert message["status"] == "completed"


async def test_an_end_the_database_refuses_still_ends_the_run_failed(
    run_client: httpx.AsyncClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = run_ends.finish
    refused: list[str] = []

    async def refusing(*args: Any, **kw: Any) -> Any:
        if kw["outcome"].content:  # the database refuses the text, whatever it is
            refused.append(kw["run_id"])
            raise DataError("UPDATE messages", {}, ValueError("a value it cannot keep"))
        return await store(*args, **kw)

    monkeypatch.setattr(run_ends, "finish", refusing)
    chat_id = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat_id, "hi")
    run = await wait_run(run_client, auth, sent["run_id"])
    assert refused == [sent["run_id"]] * 2  # the worker's end, then the sweeper's
    assert run["status"] == "failed"
    assert run["error"]["code"] == "internal_error"
    message = await stored_message(run_client, auth, chat_id, sent["message_id"])
    assert message["status"] == "failed"
    assert message["content"] == ""
