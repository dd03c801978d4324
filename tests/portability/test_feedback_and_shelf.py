"""Feedback on answers, pinned and archived-by-the-user ("shelved") chats, custom
instructions (issue 46): through the HTTP API on both stacks; each survives export and
import; feedback is counted by model in /metrics; another user's objects are 404."""

from __future__ import annotations

from typing import Any

import httpx

from parley.services import Services
from tests.archive.test_archive import _age, _chat_with_answers, _history
from tests.helpers import assert_error, user_headers
from tests.portability.test_api import _ready_export


async def _answer(client: httpx.AsyncClient, auth: dict[str, str], chat: str) -> dict[str, str]:
    history = await _history(client, auth, chat, limit=100, order="asc")
    answer: dict[str, str] = next(m for m in history["data"] if m["role"] == "assistant")
    return answer


async def _listed(client: httpx.AsyncClient, auth: dict[str, str], **params: str) -> list[str]:
    r = await client.get("/api/chats", params={"limit": 100, **params}, headers=auth)
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["data"]]


async def test_feedback_is_the_users_own_one_per_answer_and_counted_by_model(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    chat = await _chat_with_answers(run_client, ada, turns=1)
    answer = await _answer(run_client, ada, chat)
    path = f"/api/chats/{chat}/messages/{answer['id']}/feedback"

    r = await run_client.put(path, json={"rating": "down", "note": "too long"}, headers=ada)
    assert r.status_code == 200, r.text
    r = await run_client.put(path, json={"rating": "up"}, headers=ada)  # replaces it
    assert (r.json()["rating"], r.json()["note"]) == ("up", None)
    shown = await _answer(run_client, ada, chat)
    assert shown["feedback"]["rating"] == "up"  # type: ignore[index]
    metrics = (await run_client.get("/metrics")).text
    assert f'parley_feedback_total{{model="{answer["model"]}",rating="up"}} 1.0' in metrics

    bob = await user_headers(run_client, "bob@example.com")
    assert_error(await run_client.put(path, json={"rating": "up"}, headers=bob), 404)
    bad = await run_client.put(path, json={"rating": "meh"}, headers=ada)
    assert bad.status_code == 422 and "rating" in bad.text
    history = await _history(run_client, ada, chat, limit=100, order="asc")
    question = history["data"][0]["id"]
    r = await run_client.put(
        f"/api/chats/{chat}/messages/{question}/feedback", json={"rating": "up"}, headers=ada
    )
    assert_error(r, 422, "not_an_answer")
    assert (await run_client.delete(path, headers=ada)).status_code == 200
    assert (await _answer(run_client, ada, chat)).get("feedback") is None


async def test_pinned_and_shelved_chats_list_apart_and_come_back(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    ids = [
        (await run_client.post("/api/chats", json={"title": f"c{i}"}, headers=ada)).json()["id"]
        for i in range(3)
    ]
    await run_client.patch(f"/api/chats/{ids[0]}", json={"pinned": True}, headers=ada)
    await run_client.patch(f"/api/chats/{ids[1]}", json={"shelved": True}, headers=ada)

    assert set(await _listed(run_client, ada)) == {ids[0], ids[2]}
    assert await _listed(run_client, ada, pinned="true") == [ids[0]]
    assert await _listed(run_client, ada, shelved="true") == [ids[1]]
    hits = (await run_client.get("/api/search", params={"q": "c1"}, headers=ada)).json()["data"]
    assert [h["chat_id"] for h in hits] == [ids[1]]  # still found by search

    r = await run_client.patch(f"/api/chats/{ids[1]}", json={"shelved": False}, headers=ada)
    assert r.json()["shelved_at"] is None
    assert set(await _listed(run_client, ada)) == set(ids)
    assert_error(await run_client.patch(f"/api/chats/{ids[1]}", json={}, headers=ada), 422)
    for loose in (0, "true", None):  # a flag is a JSON boolean (None: no change asked)
        r = await run_client.patch(f"/api/chats/{ids[1]}", json={"shelved": loose}, headers=ada)
        assert r.status_code == 422, (loose, r.text)
    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.patch(f"/api/chats/{ids[0]}", json={"pinned": False}, headers=bob)
    assert_error(r, 404)


async def test_feedback_pins_shelf_and_instructions_survive_export_and_import(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    chat = await _chat_with_answers(run_client, ada, turns=1)
    answer = await _answer(run_client, ada, chat)
    await run_client.put(
        f"/api/chats/{chat}/messages/{answer['id']}/feedback",
        json={"rating": "down", "note": "wrong year"},
        headers=ada,
    )
    change = {"pinned": True, "shelved": True, "instructions": "Cite sources."}
    assert (await run_client.patch(f"/api/chats/{chat}", json=change, headers=ada)).is_success
    await run_client.patch("/api/me", json={"instructions": "Be brief."}, headers=ada)

    export = await _ready_export(run_client, ada)
    data = (await run_client.get(export["download_url"])).content
    bob = await user_headers(run_client, "bob@example.com")
    r = await run_client.post(
        "/api/imports", params={"filename": "export.zip"}, content=data, headers=bob
    )
    assert r.status_code == 201, r.text

    [mine] = await _listed(run_client, bob, shelved="true")
    got = (await run_client.get(f"/api/chats/{mine}", headers=bob)).json()
    assert got["pinned_at"] is not None and got["instructions"] == "Cite sources."
    rated: dict[str, Any] = dict(await _answer(run_client, bob, mine))
    said = rated["feedback"]
    assert (said["rating"], said["note"]) == ("down", "wrong year")


async def test_an_answer_in_a_chat_archived_for_being_idle_can_be_rated(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    chat = await _chat_with_answers(run_client, ada, turns=1)
    answer = await _answer(run_client, ada, chat)
    await _age(run_services, chat)
    assert (await run_services.archiver.archive_due()).archived == 1
    path = f"/api/chats/{chat}/messages/{answer['id']}/feedback"
    r = await run_client.put(path, json={"rating": "up"}, headers=ada)
    assert r.status_code == 200, r.text
    assert (await _answer(run_client, ada, chat))["feedback"]["rating"] == "up"  # type: ignore[index]
    bob = await user_headers(run_client, "bob@example.com")
    assert_error(await run_client.put(path, json={"rating": "up"}, headers=bob), 404)
    missing = f"/api/chats/{chat}/messages/msg_0123456789abcdef01234567/feedback"
    assert_error(await run_client.put(missing, json={"rating": "up"}, headers=ada), 404)
