"""MCP servers' tools in a chat (issue 43), against a real MCP server process written with
the ``mcp`` SDK (``tests/tools/mcp_server.py``) over Streamable HTTP and over stdio: a call
answered from the server's result; an error result and a server that dies mid-call are
outcomes and the run goes on; a server that is down leaves its tools out and the chat
answers. The fake engine scripts the calls. Both stacks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import ROOMY_TIERS
from tests.helpers import user_headers
from tests.processes import free_port
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.runs.test_tool_rounds import _replay
from tests.sse import text_of
from tests.waiting import eventually_sync

REPO = Path(__file__).resolve().parents[2]
SERVERS = ["mcp:weather", "mcp:local", "mcp:down"]


@pytest.fixture
def mcp_url(tmp_path: Path) -> Iterator[str]:
    """A server of its own per test (one of them dies)."""
    port = free_port()
    log = (tmp_path / "mcp.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.mcp_server", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        assert proc.poll() is None, "the MCP server exited"
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return True
        except httpx.TransportError:
            return False

    try:
        eventually_sync(up, "the MCP server to listen", timeout=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.fixture
def run_overrides(mcp_url: str) -> dict[str, Any]:
    tiers = {name: {**tier, "tools": SERVERS} for name, tier in ROOMY_TIERS.items()}
    servers = [
        {"name": "weather", "url": mcp_url, "timeout_seconds": 10},
        {"name": "local", "command": [sys.executable, "-m", "tests.tools.mcp_server", "stdio"],
         "env": {"PYTHONPATH": str(REPO)}},
        {"name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_seconds": 2},
    ]  # fmt: skip
    return {"tiers": tiers, "default_tier": "free", "tools": {"mcp_servers": servers}}


@pytest.mark.parametrize("server", ["weather", "local"], ids=["http", "stdio"])
async def test_an_mcp_servers_tool_answers_in_a_chat(
    run_client: httpx.AsyncClient, server: str
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    call = f'/call {server}__get_weather {{"city": "Lisbon"}}'
    sent = await send_json(run_client, auth, chat, call, tools=[f"mcp:{server}"])
    run = await wait_run(run_client, auth, sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    seen = await _replay(run_client, auth, sent["run_id"])
    (result,) = [e.data for e in seen if e.event == "tool_result"]
    assert (result["name"], result["status"]) == (f"{server}__get_weather", "ok")
    assert "Lisbon: sunny, 21 degrees" in text_of(seen)


async def test_errors_and_a_server_dying_mid_call_are_outcomes(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    results = {}
    for call in ("weather__fail", "weather__die"):  # one after the other: die ends the server
        sent = await send_json(run_client, auth, chat, f"/call {call} {{}}", tools=["mcp:weather"])
        run = await wait_run(run_client, auth, sent["run_id"], timeout=60)
        assert run["status"] == "completed", run
        seen = await _replay(run_client, auth, sent["run_id"])
        (results[call],) = [e.data for e in seen if e.event == "tool_result"]
    assert results["weather__fail"]["status"] == "error"
    assert "Error executing tool fail" in results["weather__fail"]["preview"]
    assert results["weather__die"]["status"] == "error"
    assert "failed during the call" in results["weather__die"]["preview"]


async def test_a_server_that_is_down_leaves_its_tools_out(run_client: httpx.AsyncClient) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat = await new_chat(run_client, auth)
    sent = await send_json(
        run_client, auth, chat, "/call down__anything {}", tools=["mcp:down", "mcp:local"]
    )
    run = await wait_run(run_client, auth, sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    seen = await _replay(run_client, auth, sent["run_id"])
    (result,) = [e.data for e in seen if e.event == "tool_result"]
    assert result["status"] == "refused" and "no tool" in result["preview"]
