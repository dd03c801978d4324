"""Fixtures for tests that run parley as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import free_port


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PARLEY_DATABASE_URL": database_url, "PARLEY_ENGINE": "fake"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley", "serve", "--data-dir", str(tmp_path), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a loaded CI machine starts it slowly
        while True:
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # a slow one still running: its output ends only once it stops
                out = proc.communicate(timeout=15)[0].decode()
                pytest.fail(f"parley serve did not become ready:\n{out}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=15)
