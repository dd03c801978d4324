"""`parley serve` as a real process: migrations applied by itself, the walkthrough over TCP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_walkthrough import walkthrough
from tests.processes import free_port

pytestmark = pytest.mark.slow


async def test_walkthrough_over_tcp(served: str) -> None:
    async with httpx.AsyncClient(base_url=served) as client:
        await walkthrough(client)


def test_serve_embedded_default_creates_its_database(tmp_path: Path) -> None:
    """With no database URL, serve makes a SQLite file in the data directory."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley", "serve", "--data-dir", str(data), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert r.json() == {"status": "ready", "checks": {"store": "ok", "bus": "ok"}}
        assert (data / "parley.db").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
