"""Temporary chats (issue 46) through the HTTP API, on both stacks: the browser sends the
whole conversation with each message; it is answered as a send is (the system prompt and
the user's instructions first, streamed, resumable, stoppable, billed) and no text of it
reaches the database (every table read, the search index's included) or the chat list."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import inspect, text

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.context.test_long_chats import Recorder
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import JSON, wait_run
from tests.sse import collect, events, text_of
from tests.waiting import eventually

SECRET = "quetzalcoatl-7731"  # in the question and, echoed, in the answer
EARLIER = "axolotl-5519"  # an earlier turn of the conversation


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"models": [{"name": "parley-fake", "engine": "fake", "system_prompt": "Be brief."}]}


def conversation(question: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"what is an {EARLIER}?"},
            {"role": "assistant", "content": f"An {EARLIER} is a salamander."},
            {"role": "user", "content": question},
        ]
    }


async def database_text(svc: Services) -> str:
    """Every row of every table of the database, as text (the search index's too)."""
    dumped: list[str] = []
    async with svc.db.engine.connect() as conn:
        names = await conn.run_sync(lambda c: inspect(c).get_table_names())
        for name in names:
            query = text(f'SELECT * FROM "{name}"')  # noqa: S608 (the database's own names)
            rows = (await conn.execute(query)).all()
            dumped += [f"{name}: {row}" for row in rows]
    assert any(name.startswith("runs") for name in names)
    return "\n".join(dumped)


async def test_a_temporary_chat_is_answered_and_no_text_of_it_is_stored(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(run_services.engine, FakeEngine)
    recorder = Recorder(run_services.engine, monkeypatch)
    auth = await user_headers(run_client, "ada@example.com")
    await run_client.patch("/api/me", json={"instructions": "Answer in French."}, headers=auth)
    body = conversation(f"/echo the word is {SECRET}")
    async with run_client.stream(
        "POST", "/api/temporary/messages", json=body, headers={**auth, "Idempotency-Key": "t1"}
    ) as r:
        assert r.status_code == 200, await r.aread()
        streamed = await collect(r)
    assert text_of(streamed) == f"the word is {SECRET}"
    done = streamed[-1]
    assert done.event == "done" and done.data["status"] == "completed"
    assert done.data["message_id"] is None
    run_id = done.data["run_id"]

    asked = recorder.requests[run_id].messages
    assert [m.role for m in asked] == ["system", "user", "assistant", "user"]
    assert "Be brief." in asked[0].content and "Answer in French." in asked[0].content
    assert EARLIER in asked[2].content

    run = await wait_run(run_client, auth, run_id)  # its usage, billed as any run
    assert run["usage"]["completion_tokens"] == 4 and run["usage"]["prompt_tokens"] > 10
    assert (await run_client.get("/api/chats", headers=auth)).json()["data"] == []
    r = await run_client.get("/api/search", params={"q": SECRET}, headers=auth)
    assert r.status_code == 200 and r.json()["data"] == []
    stored = await database_text(run_services)
    assert SECRET not in stored and EARLIER not in stored and "Answer in French" in stored

    async def forgotten() -> bool:  # its conversation is gone from the bus too
        return await run_services.bus.run_input(run_id) is None

    await eventually(forgotten, "the run's input to be forgotten", timeout=10)

    # resumable while its stream is kept: the rest after any event, exactly
    resume = {**auth, "Last-Event-ID": str(streamed[2].id)}
    async with run_client.stream("GET", f"/api/runs/{run_id}/events", headers=resume) as r:
        rest = [e async for e in events(r)]
    assert [e.id for e in rest] == [e.id for e in streamed[3:]]


async def test_a_temporary_answer_can_be_stopped(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    body = {**conversation("/echo " + "word " * 500), "max_tokens": 500}
    r = await run_client.post("/api/temporary/messages", json=body, headers={**auth, **JSON})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    assert (await run_client.post(f"/api/runs/{run_id}/cancel", headers=auth)).status_code == 200
    run = await wait_run(run_client, auth, run_id)
    assert run["status"] == "cancelled" and run["usage"]["completion_tokens"] < 500


async def test_a_bad_temporary_message_is_refused_by_name(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    last_answer = {"messages": [{"role": "assistant", "content": "hello"}]}
    bad = [
        (last_answer, "last_message_not_user"),
        ({"messages": []}, None),
        ({"messages": [{"role": "system", "content": "x"}]}, None),
        ({"messages": [{"role": "user", "content": "hi"}], "store": True}, None),
        ({"messages": [{"role": "user", "content": "x" * 40_000}]}, "content_too_long"),
    ]
    for body, code in bad:
        r = await run_client.post("/api/temporary/messages", json=body, headers={**auth, **JSON})
        assert_error(r, 422, code)
    async with run_services.db.engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM runs"))).scalar() == 0


async def test_a_run_whose_conversation_is_gone_fails_by_name(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def gone(run_id: str) -> None:
        return None

    monkeypatch.setattr(run_services.bus, "run_input", gone)
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post(
        "/api/temporary/messages", json=conversation("hi"), headers={**auth, **JSON}
    )
    run = await wait_run(run_client, auth, r.json()["run_id"])
    assert run["status"] == "failed" and run["error"]["code"] == "input_expired"
