"""`parley serve` as a real process: migrations applied by itself, the walkthrough over TCP."""

from __future__ import annotations

import json
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


def test_the_embedded_default_answers_with_the_bundled_model(tmp_path: Path) -> None:
    """No settings at all: SQLite in the data directory, the built-in engine, SmolLM2."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    data = tmp_path / "data"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley", "serve", "--data-dir", str(data), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # the first start dequantizes the model once
        while True:
            try:
                r = httpx.get(f"{base}/readyz")
                break
            except httpx.TransportError:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert r.json() == {
            "status": "ready",
            "checks": {"store": "ok", "bus": "ok", "engine": "ok", "tasks": "ok"},
        }
        assert (data / "parley.db").exists()
        with httpx.Client(base_url=base, timeout=120) as c:
            token = c.post(
                "/api/auth/signup", json={"email": "a@example.com", "password": "long password"}
            ).json()["token"]
            auth = {"Authorization": f"Bearer {token}"}
            chat = c.post("/api/chats", json={}, headers=auth).json()["id"]
            body = {"content": "What is the capital of France?", "temperature": 0}
            text = ""
            with c.stream("POST", f"/api/chats/{chat}/messages", json=body, headers=auth) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and '"text"' in line:
                        text += json.loads(line[6:])["text"]
            assert "Paris" in text
            msgs = c.get(f"/api/chats/{chat}/messages", headers=auth).json()["data"]
            assert msgs[0]["model"] == "SmolLM2-135M-Instruct"
            assert msgs[0]["content"] == text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
