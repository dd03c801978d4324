"""The API page's curl session (docs/API.md), run as written against a live `parley serve`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "API.md"

pytestmark = pytest.mark.slow


def walkthrough_script() -> str:
    text = API_PAGE.read_text()
    match = re.search(r"<!-- walkthrough -->\n```bash\n(.*?)```\n<!-- /walkthrough -->", text, re.S)
    assert match, "docs/API.md lost its walkthrough block"
    return match.group(1)


def run_script(script: str, base: str) -> subprocess.CompletedProcess[str]:
    """A doc's shell commands, as written, against the server at ``base``; they succeed."""
    r = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        env={"BASE": base, "PATH": "/usr/bin:/bin:/usr/local/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r


def test_readme_curl_session(served: str) -> None:
    r = run_script(walkthrough_script(), served)
    # every curl printed one JSON document; split them
    decoder = json.JSONDecoder()
    out, docs, i = r.stdout, [], 0
    while i < len(out):
        if out[i].isspace():
            i += 1
            continue
        doc, i = decoder.raw_decode(out, i)
        docs.append(doc)
    signup, me, c1, c2, c3, page1, page2, renamed, messages, deleted, gone = docs
    assert signup["user"]["email"] == "ada@example.com"
    assert me["tier"]["name"] == "free"
    assert [c["title"] for c in (c1, c2, c3)] == ["first", "second", "third"]
    assert [c["title"] for c in page1["data"]] == ["third", "second"]
    assert [c["title"] for c in page2["data"]] == ["first"]
    assert page2["next_cursor"] is None
    assert renamed["title"] == "renamed"
    assert renamed["id"] == c1["id"]
    assert messages == {"object": "list", "data": [], "next_cursor": None}
    assert deleted == {"id": c1["id"], "object": "chat.deleted", "deleted": True}
    assert gone["error"]["code"] == "chat_not_found"


def test_the_readme_quick_start_signs_up_makes_a_chat_and_streams_an_answer(served: str) -> None:
    """The README's first API call and first send, as written (its two bash blocks)."""
    text = (API_PAGE.parents[1] / "README.md").read_text()
    match = re.search(r"<!-- quickstart -->\n(.*?)<!-- /quickstart -->", text, re.S)
    assert match, "README lost its quick start blocks"
    blocks = re.findall(r"```bash\n(.*?)```", match.group(1), re.S)
    assert len(blocks) == 2, blocks
    r = run_script("".join(blocks), served)
    assert r.stdout.startswith("id: ") and "event: status" in r.stdout, r.stdout[:300]
    assert "event: delta" in r.stdout
    done = r.stdout.rsplit("event: done\ndata: ", 1)[1]
    assert json.loads(done.splitlines()[0])["status"] == "completed"
