"""Branches (issue 21) through the HTTP API, on both stacks: editing a message starts a
branch, regenerating adds a sibling answer, the prompt follows the branch shown, switching
branches, another user's ids are 404, a run on a branch not shown still resumes."""

from __future__ import annotations

from typing import Any

import httpx

from parley.services import Services
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import JSON, new_chat, send_json, wait_run
from tests.sse import collect, text_of


async def _say(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, text: str, **kw: Any
) -> dict[str, Any]:
    sent = await send_json(client, auth, chat_id, text, **kw)
    await wait_run(client, auth, sent["run_id"])
    return sent


async def _shown(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str
) -> list[dict[str, Any]]:
    r = await client.get(
        f"/api/chats/{chat_id}/messages", params={"limit": 100, "order": "asc"}, headers=auth
    )
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


async def _regenerate(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    chat_id: str,
    message_id: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/messages/{message_id}/regenerate",
        json=body or {},
        headers={**auth, **JSON, **(headers or {})},
    )


async def test_an_edit_starts_a_branch_and_the_old_one_stays(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    first = await _say(run_client, auth, chat, "first question")
    await _say(run_client, auth, chat, "second question")
    edited = await _say(
        run_client, auth, chat, "first question, better", edit_of=first["user_message_id"]
    )

    shown = await _shown(run_client, auth, chat)
    assert len(shown) == 2 and shown[0]["content"] == "first question, better"
    question = shown[0]
    assert question["sibling_ids"] == [first["user_message_id"], edited["user_message_id"]]
    assert question["sibling_index"] == 2 and question["parent_id"] is None
    assert shown[1]["parent_id"] == question["id"] and shown[1]["status"] == "completed"

    r = await run_client.put(
        f"/api/chats/{chat}/branch", json={"message_id": first["user_message_id"]}, headers=auth
    )
    assert r.status_code == 200, r.text
    old = await _shown(run_client, auth, chat)
    assert [m["content"] for m in old][::2] == ["first question", "second question"]
    assert old[0]["sibling_index"] == 1 and old[0]["sibling_ids"] == question["sibling_ids"]
    r = await run_client.put(
        f"/api/chats/{chat}/branch", json={"message_id": edited["user_message_id"]}, headers=auth
    )
    assert [m["id"] for m in await _shown(run_client, auth, chat)] == [m["id"] for m in shown]


async def test_the_prompt_follows_the_branch_shown(run_client: httpx.AsyncClient) -> None:
    """The fake engine's answer is a function of the prompt: a branch answers as a chat that
    only ever had that branch does."""
    auth = await user_headers(run_client, "ada@example.com")
    linear = await new_chat(run_client, auth)
    await _say(run_client, auth, linear, "what is a heron")
    expected = await _say(run_client, auth, linear, "and a crane")
    branched = await new_chat(run_client, auth)
    await _say(run_client, auth, branched, "what is a heron")
    detour = await _say(run_client, auth, branched, "tell me about stoats")
    got = await _say(run_client, auth, branched, "and a crane", edit_of=detour["user_message_id"])

    answers = {m["id"]: m["content"] for m in await _shown(run_client, auth, linear)}
    shown = {m["id"]: m["content"] for m in await _shown(run_client, auth, branched)}
    assert shown[got["message_id"]] == answers[expected["message_id"]]
    assert "stoats" not in " ".join(shown.values())


async def test_regenerating_adds_a_sibling_answer(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    first = await _say(run_client, auth, chat, "a question")
    r = await _regenerate(
        run_client, auth, chat, first["message_id"], headers={"Idempotency-Key": "again-1"}
    )
    assert r.status_code == 202, r.text
    again = r.json()
    assert again["user_message_id"] == first["user_message_id"]  # no new question
    await wait_run(run_client, auth, again["run_id"])
    same = await _regenerate(
        run_client, auth, chat, first["message_id"], headers={"Idempotency-Key": "again-1"}
    )
    assert same.json()["run_id"] == again["run_id"]  # a retry makes nothing new

    shown = await _shown(run_client, auth, chat)
    assert [m["id"] for m in shown] == [first["user_message_id"], again["message_id"]]
    assert shown[1]["sibling_ids"] == [first["message_id"], again["message_id"]]
    # a user message's id works too: another answer to it
    r = await _regenerate(run_client, auth, chat, first["user_message_id"])
    await wait_run(run_client, auth, r.json()["run_id"])
    assert len((await _shown(run_client, auth, chat))[1]["sibling_ids"]) == 3


async def test_a_bad_regenerate_body_is_refused_and_makes_no_answer(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    first = await _say(run_client, auth, chat, "a question")
    # found by schemathesis: lax pydantic read `true` as max_tokens 1 and answered
    for body in (
        {"max_tokens": True},
        {"max_tokens": "4"},
        {"temperature": True},
        {"max_tokens": 0},
        {"colour": "red"},
    ):
        r = await _regenerate(run_client, auth, chat, first["message_id"], body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "validation_error"
    shown = await _shown(run_client, auth, chat)
    assert shown[1]["sibling_ids"] == [first["message_id"]]


async def test_another_users_messages_are_not_found_and_answers_are_not_editable(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    bob = await user_headers(run_client, "bob@example.com")
    chat = await new_chat(run_client, ada)
    sent = await _say(run_client, ada, chat, "mine")
    bobs = await new_chat(run_client, bob)

    r = await run_client.post(
        f"/api/chats/{chat}/messages",
        json={"content": "x", "edit_of": sent["message_id"]},
        headers={**ada, **JSON},
    )
    assert_error(r, 422, "not_editable")
    for chat_id in (chat, bobs):  # bob on ada's chat, or ada's message through bob's chat
        r = await run_client.post(
            f"/api/chats/{chat_id}/messages",
            json={"content": "x", "edit_of": sent["user_message_id"]},
            headers={**bob, **JSON},
        )
        assert_error(r, 404)
        assert_error(await _regenerate(run_client, bob, chat_id, sent["message_id"]), 404)
        r = await run_client.put(
            f"/api/chats/{chat_id}/branch", json={"message_id": sent["message_id"]}, headers=bob
        )
        assert_error(r, 404)
    assert_error(await _regenerate(run_client, ada, chat, "msg_nope"), 404, "message_not_found")
    for blank in ("", "   "):  # found by schemathesis: an empty id is a 404, not a 500
        r = await run_client.post(
            f"/api/chats/{chat}/messages",
            json={"content": "x", "edit_of": blank},
            headers={**ada, **JSON},
        )
        assert_error(r, 404, "message_not_found")
    assert len(await _shown(run_client, ada, chat)) == 2  # nothing was made


async def test_a_run_on_a_branch_not_shown_still_resumes(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    first = await _say(run_client, auth, chat, "the first")
    await _say(run_client, auth, chat, "the first, again", edit_of=first["user_message_id"])

    async with run_client.stream(
        "GET", f"/api/runs/{first['run_id']}/events", headers={**auth, "Last-Event-ID": "0-1"}
    ) as r:
        assert r.status_code == 200
        events = await collect(r)
    shown = await _shown(run_client, auth, chat)
    assert first["message_id"] not in [m["id"] for m in shown]  # not the branch shown
    assert events[-1].event == "done" and text_of(events)


async def test_export_keeps_the_whole_tree_and_import_brings_it_back(
    run_client: httpx.AsyncClient,
) -> None:
    from tests.portability.test_api import _ready_export

    ada = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, ada)
    first = await _say(run_client, ada, chat, "one")
    await _say(run_client, ada, chat, "two", edit_of=first["user_message_id"])
    export = await _ready_export(run_client, ada)
    data = (await run_client.get(export["download_url"])).content

    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.post("/api/imports", content=data, headers=bob)
    assert r.status_code == 201, r.text
    copy = r.json()["chat_ids"][0]
    shown = await _shown(run_client, bob, copy)
    assert [m["content"] for m in shown][:1] == ["two"] and len(shown) == 2
    assert shown[0]["sibling_index"] == 2 and len(shown[0]["sibling_ids"]) == 2
    r = await run_client.put(
        f"/api/chats/{copy}/branch", json={"message_id": shown[0]["sibling_ids"][0]}, headers=bob
    )
    assert r.status_code == 200
    assert [m["content"] for m in await _shown(run_client, bob, copy)][:1] == ["one"]
