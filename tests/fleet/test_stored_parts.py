"""Reasoning and tool calls kept in chats: an answer's reasoning is stored apart from it and
never sent back to a model; a program's conversation kept with ``store: true`` keeps its
calls and their results as structured parts of its messages, which a later turn sends back
as calls and results; export, import, archive and shared links keep them. Against scripted
upstreams in vLLM's shapes (``tests.fleet.scripted``)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import httpx

from tests.archive.test_archive import _age
from tests.fleet.conftest import FLEET_MODEL, Fleet, Front
from tests.fleet.servers import Misbehaving
from tests.fleet.test_tools import WEATHER
from tests.helpers import bearer, signup, user_headers
from tests.portability.test_api import _ready_export
from tests.runs.helpers import send_json, wait_run
from tests.waiting import eventually

KEPT: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_r1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_r1", "content": "sunny, 24 degrees"},
    {"role": "user", "content": "And in Paris and the time there?"},
]


async def _messages(front: Front, auth: dict[str, str], chat_id: str) -> list[dict[str, Any]]:
    r = await front.client.get(
        f"/api/chats/{chat_id}/messages", params={"limit": 100, "order": "asc"}, headers=auth
    )
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["role"],
            m["content"],
            [c["function"]["name"] for c in m.get("tool_calls") or []],
            m.get("tool_call_id"),
        )
        for m in messages
    ]


async def _kept_chat(front: Front) -> tuple[dict[str, str], str]:
    """A program's conversation with calls kept as a chat; its answer calls two tools."""
    session = (await signup(front.client, "keeper@example.com"))["token"]
    auth = bearer(session)
    made = await front.client.post("/api/keys", json={"name": "script"}, headers=auth)
    key = made.json()["key"]
    r = await front.client.post(
        "/v1/chat/completions",
        json={"model": FLEET_MODEL, "messages": KEPT, "tools": [WEATHER], "store": True},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    chats = (await front.client.get("/api/chats", headers=auth)).json()["data"]
    return auth, chats[0]["id"]


EXPECTED = [
    ("user", "Weather in Rome?", [], None),
    ("assistant", "", ["get_weather"], None),
    ("tool", "sunny, 24 degrees", [], "call_r1"),
    ("user", "And in Paris and the time there?", [], None),
    ("assistant", "", ["get_weather", "get_time"], None),
]


async def test_a_kept_conversation_keeps_its_calls_and_sends_them_back(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("vllm-calls")
    async with fleet([server.url]) as front:
        auth, chat_id = await _kept_chat(front)
        messages = await _messages(front, auth, chat_id)
        assert _shape(messages) == EXPECTED
        answer = messages[-1]["tool_calls"]
        assert [c["id"] for c in answer] == ["chatcmpl-tool-a1", "chatcmpl-tool-b2"]
        assert json.loads(answer[0]["function"]["arguments"]) == {
            "city": "Paris",
            "unit": "celsius",
        }
        # the chat goes on in the chat API: the calls and results go back to the model
        sent = await send_json(front.client, auth, chat_id, "thanks", max_tokens=8)
        await wait_run(front.client, auth, sent["run_id"])
    body = server.last_body()
    roles = [m["role"] for m in body["messages"]]
    assert roles[-6:] == ["user", "assistant", "tool", "user", "assistant", "user"]
    first_call = body["messages"][-5]["tool_calls"][0]
    assert first_call["id"] == "call_r1" and first_call["function"]["name"] == "get_weather"
    assert body["messages"][-4]["tool_call_id"] == "call_r1"
    assert [c["id"] for c in body["messages"][-2]["tool_calls"]] == [c["id"] for c in answer]


async def test_reasoning_is_kept_apart_and_never_sent_back(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("reasoning")
    async with fleet([server.url]) as front:
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id = r.json()["id"]
        sent = await send_json(front.client, front.auth, chat_id, "hi", max_tokens=16)
        await wait_run(front.client, front.auth, sent["run_id"])
        (_, answer) = await _messages(front, front.auth, chat_id)
        assert answer["content"] == "Hello to you."
        assert answer["reasoning"] == "The user greets me; I greet back."
        again = await send_json(front.client, front.auth, chat_id, "again", max_tokens=16)
        await wait_run(front.client, front.auth, again["run_id"])
    sent_texts = json.dumps(server.last_body()["messages"])
    assert "Hello to you." in sent_texts and "greet back" not in sent_texts


async def test_export_import_archive_and_shares_keep_the_parts(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("vllm-calls")
    async with fleet([server.url]) as front:
        auth, chat_id = await _kept_chat(front)
        # a shared link: the calls and the tool's result, readable
        share = (await front.client.post(f"/api/chats/{chat_id}/shares", headers=auth)).json()
        token = share["url"].removeprefix("/s/")
        public = httpx.AsyncClient(base_url=str(front.client.base_url))
        async with public:
            shared = (await public.get(f"/api/shared/{token}")).json()["messages"]
            page = (await public.get(share["url"])).text
        assert _shape(shared) == EXPECTED
        assert "Called get_time" in page and "sunny, 24 degrees" in page
        # export, then import into another account: the same chat, parts and all
        ready = await _ready_export(front.client, auth)
        data = (await front.client.get(ready["download_url"])).content
        document = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("parley-export.json"))
        exported = document["chats"][0]["messages"]
        assert exported[2]["tool_call_id"] == "call_r1"
        markdown = [n for n in zipfile.ZipFile(io.BytesIO(data)).namelist() if n.endswith(".md")]
        shown = zipfile.ZipFile(io.BytesIO(data)).read(markdown[0]).decode()
        assert "Called `get_time`" in shown and "(result of `call_r1`)" in shown
        bob = await user_headers(front.client, "bob@example.com")
        r = await front.client.post(
            "/api/imports", params={"filename": "export.zip"}, content=data, headers=bob
        )
        assert r.status_code == 201, r.text
        imported = (await front.client.get("/api/chats", headers=bob)).json()["data"][0]["id"]
        assert _shape(await _messages(front, bob, imported)) == EXPECTED
        # archived and read back from the archive
        await _age(front.services, chat_id)
        assert (await front.services.archiver.archive_due()).archived >= 1
        front.services.archiver._cache.clear()

        async def archived() -> bool:
            r = await front.client.get(f"/api/chats/{chat_id}", headers=auth)
            return r.json().get("archived_at") is not None

        await eventually(archived, "the chat to be archived")
        assert _shape(await _messages(front, auth, chat_id)) == EXPECTED
