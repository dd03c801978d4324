"""The MCP server that acts as its users (``mcp_oauth_server.py``) as a process of the
tests: started on a port of its own, restartable there (a restart forgets every token and
client it issued)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.processes import free_port
from tests.waiting import eventually_sync

REPO = Path(__file__).resolve().parents[2]


class NotesServer:
    """The MCP server process (restartable on its port: a restart forgets every token)."""

    def __init__(self, tmp_path: Path, token_seconds: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._log = (tmp_path / "notes.log").open("ab")
        self._seconds = token_seconds
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "tests.tools.mcp_oauth_server", str(self.port)]
        proc = subprocess.Popen(
            [*command, str(self._seconds)], env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self._proc = proc

        def up() -> bool:
            assert proc.poll() is None, "the MCP server exited"
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/.well-known/oauth-authorization-server")
                return True
            except httpx.TransportError:
                return False

        eventually_sync(up, "the MCP server to listen", timeout=30)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    @property
    def expiring(self) -> bool:
        """Its tokens last less than parley's refresh margin: every use refreshes first."""
        return self._seconds < 60

    def close(self) -> None:
        self.stop()
        self._log.close()
