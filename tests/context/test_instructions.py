"""Custom instructions (issue 46): the user's and the chat's, in that order, after the
system prompt in every prompt of the chat; counted in the run's budget and named in its
prompt detail; cleared with ""; another user's chat is 404."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.services import Services
from tests.context.test_long_chats import Recorder
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run

SYSTEM = "You are brief."
MINE = "Answer in French."
CHATS = "Use metric units only."


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"models": [{"name": FAKE_MODEL, "engine": "fake", "system_prompt": SYSTEM}]}


async def test_the_users_and_the_chats_instructions_open_every_prompt_and_count(
    run_client: httpx.AsyncClient, run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(run_services.engine, FakeEngine)
    recorder = Recorder(run_services.engine, monkeypatch)
    auth = await user_headers(run_client, "instructed@example.com")
    chat_id = await new_chat(run_client, auth)

    async def system_of(content: str) -> tuple[str, dict[str, Any]]:
        sent = await send_json(run_client, auth, chat_id, content, max_tokens=8)
        run = await wait_run(run_client, auth, sent["run_id"])
        first = recorder.requests[run["id"]].messages[0]
        assert first.role == "system"
        return first.content, run["prompt"]

    plain, plain_parts = await system_of("hello")
    assert plain == SYSTEM and plain_parts["instructions"] == []

    r = await run_client.patch("/api/me", json={"instructions": MINE}, headers=auth)
    assert r.status_code == 200 and r.json()["instructions"] == MINE
    r = await run_client.patch(f"/api/chats/{chat_id}", json={"instructions": CHATS}, headers=auth)
    assert r.status_code == 200 and r.json()["instructions"] == CHATS

    system, parts = await system_of("how far is Lyon?")
    assert system.startswith(SYSTEM)
    assert system.index(MINE) < system.index(CHATS)  # the user's, then the chat's
    assert parts["instructions"] == ["user", "chat"]
    assert parts["system_tokens"] > plain_parts["system_tokens"] + 6  # counted in the budget

    other = await user_headers(run_client, "other@example.com")
    r = await run_client.patch(f"/api/chats/{chat_id}", json={"instructions": "x"}, headers=other)
    assert r.status_code == 404

    await run_client.patch("/api/me", json={"instructions": ""}, headers=auth)
    system, parts = await system_of("and Paris?")
    assert MINE not in system and CHATS in system and parts["instructions"] == ["chat"]


async def test_instructions_too_long_are_refused_by_name(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "long@example.com")
    r = await run_client.patch("/api/me", json={"instructions": "x" * 4001}, headers=auth)
    assert r.status_code == 422
    assert "instructions" in r.text


class TestTheInputPolicyChecksInstructions:
    """Instructions go into every prompt: the tier's input policy checks them when saved."""

    @pytest.fixture
    def settings_overrides(self) -> dict[str, Any]:
        rules = {"kind": "rules", "categories": {"violence": {"patterns": [r"\bforbidden\b"]}}}
        return {"safety": {"classifiers": {"rules": rules}}}

    async def test_refused_instructions_are_not_stored(self, client: httpx.AsyncClient) -> None:
        auth = await user_headers(client, "sly@example.com")
        chat = (await client.post("/api/chats", json={"title": "t"}, headers=auth)).json()
        bad = {"instructions": "always tell the forbidden thing"}
        for path in ("/api/me", f"/api/chats/{chat['id']}"):
            r = await client.patch(path, json=bad, headers=auth)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "content_blocked"
            assert r.json()["error"]["param"] == "instructions"
        assert (await client.get("/api/me", headers=auth)).json()["user"]["instructions"] is None
        got = (await client.get(f"/api/chats/{chat['id']}", headers=auth)).json()
        assert got["instructions"] is None
        fine = await client.patch("/api/me", json={"instructions": "be kind"}, headers=auth)
        assert fine.status_code == 200
