"""Continuing a cut answer (issue 46) through the HTTP API, on both stacks: a new version of
the answer beside it, beginning with its text; the engine is given the old answer as its
turn begun; only the new text is billed as output; a question, an answer still being
written and another user's answer cannot be continued."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FakeEngine
from parley.services import Services
from tests.context.test_long_chats import Recorder
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import JSON, new_chat, send_json, wait_run
from tests.sse import collect, text_of


async def _continue(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    chat_id: str,
    message_id: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/messages/{message_id}/continue",
        json=body or {},
        headers={**auth, **(headers or JSON)},
    )


async def _answers(client: httpx.AsyncClient, auth: dict[str, str], chat: str) -> Any:
    r = await client.get(f"/api/chats/{chat}/messages", params={"order": "asc"}, headers=auth)
    assert r.status_code == 200, r.text
    return r.json()["data"]


async def test_a_cut_answer_continues_as_a_new_version_that_begins_with_it(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(run_services.engine, FakeEngine)
    recorder = Recorder(run_services.engine, monkeypatch)
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat, "a long poem please", max_tokens=4)
    first = await wait_run(run_client, auth, sent["run_id"])
    cut = (await _answers(run_client, auth, chat))[1]
    assert cut["cut"] and first["finish_reason"] == "length"

    key = {**JSON, "Idempotency-Key": "more-1"}
    r = await _continue(run_client, auth, chat, cut["id"], {"max_tokens": 6}, key)
    assert r.status_code == 202, r.text
    more = r.json()
    assert more["user_message_id"] == sent["user_message_id"]  # no new question
    run = await wait_run(run_client, auth, more["run_id"])
    again = await _continue(run_client, auth, chat, cut["id"], {"max_tokens": 6}, key)
    assert again.json()["run_id"] == more["run_id"]  # a retry makes nothing new

    shown = await _answers(run_client, auth, chat)
    answer = shown[1]
    assert answer["id"] == more["message_id"] and answer["sibling_ids"] == [cut["id"], answer["id"]]
    assert answer["content"].startswith(cut["content"] + " ")
    assert len(answer["content"].split()) == 4 + 6
    asked = recorder.requests[more["run_id"]]
    assert asked.continue_final and asked.messages[-1].role == "assistant"
    assert asked.messages[-1].content == cut["content"]
    # billed as a run: the old answer is in its prompt, only the new words are its output
    assert run["usage"]["completion_tokens"] == 6
    assert run["usage"]["prompt_tokens"] >= first["usage"]["prompt_tokens"] + 4


async def test_a_continued_answer_streams_its_start_first(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat, "a story", max_tokens=3)
    await wait_run(run_client, auth, sent["run_id"])
    old = (await _answers(run_client, auth, chat))[1]["content"]
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat}/messages/{sent['message_id']}/continue",
        json={"max_tokens": 2},
        headers={**auth, "Accept": "text/event-stream"},
    ) as r:
        assert r.status_code == 200
        events = await collect(r)
    deltas = [e for e in events if e.event == "delta"]
    assert deltas[0].data == {"text": old, "tokens": 0}
    assert text_of(events) == (await _answers(run_client, auth, chat))[1]["content"]
    assert events[-1].event == "done" and events[-1].data["usage"]["completion_tokens"] == 2


async def test_only_an_ended_answer_of_ones_own_can_be_continued(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, ada)
    sent = await send_json(run_client, ada, chat, "hello", max_tokens=3)
    await wait_run(run_client, ada, sent["run_id"])
    question = sent["user_message_id"]
    assert_error(await _continue(run_client, ada, chat, question), 422, "not_continuable")
    bob = await user_headers(run_client, "bob@example.com")
    assert_error(await _continue(run_client, bob, chat, sent["message_id"]), 404)
    assert_error(await _continue(run_client, ada, chat, "msg_nope"), 404, "message_not_found")
    slow = await send_json(run_client, ada, chat, "/echo " + "word " * 500, max_tokens=500)
    r = await _continue(run_client, ada, chat, slow["message_id"])
    assert_error(r, 422, "not_continuable")  # still being written
    await run_client.post(f"/api/runs/{slow['run_id']}/cancel", headers=ada)
    assert len(await _answers(run_client, ada, chat)) == 4  # two sends; the refusals made nothing
