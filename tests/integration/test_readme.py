"""The README's curl session, run as written against a live `parley serve`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.slow


def walkthrough_script() -> str:
    text = README.read_text()
    match = re.search(r"<!-- walkthrough -->\n```bash\n(.*?)```\n<!-- /walkthrough -->", text, re.S)
    assert match, "README lost its walkthrough block"
    return match.group(1)


def test_readme_curl_session(served: str) -> None:
    script = "set -euo pipefail\n" + walkthrough_script()
    r = subprocess.run(
        ["bash", "-c", script],
        env={"BASE": served, "PATH": "/usr/bin:/bin:/usr/local/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
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
