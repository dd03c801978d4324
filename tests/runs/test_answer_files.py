"""Files ``run_python`` writes come back as attachments of the answer (issue 43): named in
the ``tool_result`` event as it streams, listed with the answer's message after a reload,
downloaded as a file (never rendered as a page), another user's 404, and seen by a later
question in the chat as a file the user sent is. Both stacks, the real sandbox."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.tools.sandbox import unavailable
from parley.tools.settings import SandboxSettings
from tests.builders import ROOMY_TIERS
from tests.helpers import assert_error, user_headers
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.runs.test_tool_rounds import _replay

CODE = (
    "open('table.csv', 'w').write('city,rain\\nLisbon,3\\n'); "
    "open('page.html', 'w').write('<script>alert(1)</script>'); print('written')"
)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """One the sandbox's user may pass through (pytest's own directories are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="parley-files-"))
    folder.chmod(0o711)
    assert unavailable(SandboxSettings(), folder) is None, "`make test` installs bubblewrap"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def run_overrides(data_dir: Path) -> dict[str, Any]:
    tiers = {name: {**tier, "tools": ["run_python"]} for name, tier in ROOMY_TIERS.items()}
    return {"tiers": tiers, "default_tier": "free", "data_dir": data_dir}


async def test_files_written_by_run_python_are_attachments_of_the_answer(
    run_client: httpx.AsyncClient,
) -> None:
    ada = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, ada)
    call = "/call run_python " + json.dumps({"code": CODE})
    sent = await send_json(run_client, ada, chat, call, tools=["run_python"])
    run = await wait_run(run_client, ada, sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    (result,) = [
        e.data for e in await _replay(run_client, ada, sent["run_id"]) if e.event == "tool_result"
    ]
    assert result["status"] == "ok", result
    streamed = {f["name"]: f for f in result["files"]}
    assert set(streamed) == {"table.csv", "page.html"}

    r = await run_client.get(f"/api/chats/{chat}/messages", headers=ada)
    answer = next(m for m in r.json()["data"] if m["id"] == sent["message_id"])
    listed = {a["name"]: a for a in answer["attachments"]}
    assert {n: a["id"] for n, a in listed.items()} == {n: f["id"] for n, f in streamed.items()}

    table = await run_client.get(
        f"/api/attachments/{listed['table.csv']['id']}/content", headers=ada
    )
    assert table.status_code == 200 and table.content == b"city,rain\nLisbon,3\n"
    assert table.headers["content-type"].startswith("text/csv")
    assert table.headers["content-disposition"].startswith("attachment;")
    page = await run_client.get(
        f"/api/attachments/{listed['page.html']['id']}/content", headers=ada
    )
    assert page.headers["content-type"] == "application/octet-stream"  # never rendered
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in page.headers["content-security-policy"]

    bob = await user_headers(run_client, "bob@example.com")
    other = await run_client.get(
        f"/api/attachments/{listed['table.csv']['id']}/content", headers=bob
    )
    assert_error(other, 404, "attachment_not_found")

    follow = await send_json(run_client, ada, chat, "/echo which city?")
    done = await wait_run(run_client, ada, follow["run_id"], timeout=60)
    assert done["status"] == "completed", done
    r = await run_client.get(f"/api/chats/{chat}/messages", headers=ada)
    echoed = next(m for m in r.json()["data"] if m["id"] == follow["message_id"])["content"]
    assert "File: table.csv" in echoed and "Lisbon,3" in echoed, echoed  # the prompt held it
