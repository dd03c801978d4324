"""``parley runs refused`` as a process: the operator lists the runs the content policy
refused (a prompt before admission, an answer while it streamed), newest first, filtered by
user and age, as text or JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from parley.config import Settings
from tests.helpers import user_headers
from tests.sse import collect

pytestmark = pytest.mark.slow

RULES = {
    "kind": "rules",
    "categories": {
        "violence": {"patterns": [r"\bforbidden\b"], "stages": ["input"]},
        "secrets": {"patterns": [r"\bhunter2\b"], "stages": ["output"]},
    },
}


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"safety": {"classifiers": {"rules": RULES}}}


def parley(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return subprocess.run(
        [sys.executable, "-m", "parley", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def test_the_operator_lists_refused_runs(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_settings: Settings
) -> None:
    chat_id = (await run_client.post("/api/chats", json={}, headers=auth)).json()["id"]
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages", json={"content": "forbidden words"}, headers=auth
    )
    assert r.status_code == 400
    async with run_client.stream(
        "POST",
        f"/api/chats/{chat_id}/messages",
        json={"content": "/echo the password is hunter2 ok"},
        headers=auth,
    ) as stream:
        stopped = (await collect(stream))[-1].data
    assert stopped["status"] == "rejected"
    other = await user_headers(run_client, "bob@example.com")
    bob_chat = (await run_client.post("/api/chats", json={}, headers=other)).json()["id"]
    await run_client.post(
        f"/api/chats/{bob_chat}/messages", json={"content": "forbidden too"}, headers=other
    )
    db = ["--database-url", run_settings.database.resolved_url]

    listed = parley("runs", "refused", *db, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(row["user"], row["stage"]) for row in rows] == [
        ("bob@example.com", "input"),
        ("ada@example.com", "output"),
        ("ada@example.com", "input"),
    ]
    assert rows[1]["run_id"] == stopped["run_id"]
    assert {row["code"] for row in rows} == {"content_blocked"}
    assert "secrets" in rows[1]["message"] and "violence" in rows[2]["message"]
    assert rows[2]["chat_id"] == chat_id

    mine = parley("runs", "refused", *db, "--user", "ADA@example.com", "--since", "1h")
    assert mine.returncode == 0, mine.stderr
    lines = mine.stdout.splitlines()
    assert len(lines) == 2 and all("ada@example.com" in line for line in lines)
    assert lines[0].split("\t")[1] == stopped["run_id"]
    assert parley("runs", "refused", *db, "--limit", "1", "--json").stdout.count("\n") == 1

    bad = parley("runs", "refused", *db, "--since", "yesterday")
    assert bad.returncode == 2 and "not a duration" in bad.stderr
