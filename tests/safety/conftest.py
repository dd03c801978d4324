"""The classifiers against real processes: ``parley engine serve --engine fake`` answering
``/v1/moderations`` with its rule set, the same scripted to play a guard model, and
``tests.safety.moderation_server`` misbehaving; parley itself on both run stacks
(``run_client``) in front of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import user_headers
from tests.processes import Parley, free_port
from tests.waiting import eventually_sync

REPO = Path(__file__).resolve().parents[2]

# the rule set `parley engine serve` answers /v1/moderations with
SERVED_RULES = {
    "rules": {
        "kind": "rules",
        "categories": {"violence": {"patterns": [r"\bforbidden\b"]}},
        "prompt_injection": False,
    }
}


@pytest.fixture
async def auth(run_client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(run_client, "ada@example.com")


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def engine_serve(tmp: Path, name: str, env: dict[str, str]) -> tuple[Parley, str]:
    """``parley engine serve --engine fake`` on a port of its own; its ``/v1`` URL."""
    port = free_port()
    proc = Parley(
        ["engine", "serve", "--engine", "fake", "--port", str(port)], env, tmp / f"{name}.log"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_log("engine serving")
        eventually_sync(lambda: _up(f"{base}/health"), f"{name}'s /health")
    except BaseException:
        proc.stop()
        raise
    return proc, f"{base}/v1"


@pytest.fixture(scope="module")
def moderation_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moderation endpoint: parley's engine server answering with its rule set."""
    env = {"PARLEY_SAFETY__CLASSIFIERS": json.dumps(SERVED_RULES)}
    proc, url = engine_serve(tmp_path_factory.mktemp("moderation"), "moderation", env)
    yield url
    proc.stop()


@pytest.fixture(scope="module")
def guard_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A guard model: the fake engine scripted to answer ``unsafe`` and its categories when
    the turn it judges says "forbidden", else ``safe``; an ``/echo`` prompt (which has the
    fake engine repeat it) passes whatever it says, so a test can make an answer turn bad."""
    env = {
        "PARLEY_FAKE_ENGINE__ANSWERS": json.dumps(
            {r"(?is)^(?!/echo ).*\bforbidden\b": "unsafe\nS1,S10"}
        ),
        "PARLEY_FAKE_ENGINE__ANSWER": "safe",
        "PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS": "0",
        "PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS": "0",
        "PARLEY_FAKE_ENGINE__SLOTS": "32",
    }
    proc, url = engine_serve(tmp_path_factory.mktemp("guard"), "guard", env)
    yield url
    proc.stop()


class Misbehaving:
    """``python -m tests.safety.moderation_server MODE PORT``."""

    def __init__(self, tmp: Path, mode: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        self._out = (tmp / f"moderation-{mode}.log").open("wb")
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.safety.moderation_server", mode, str(self.port)],
            env={**os.environ, "PYTHONPATH": path},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        try:
            eventually_sync(lambda: _up(f"{self.base}/count"), f"the {mode} server to listen")
        except BaseException:
            self.stop()
            raise

    def count(self) -> int:
        return int(httpx.get(f"{self.base}/count", timeout=5).json()["count"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._out.close()


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Misbehaving]]:
    tmp = tmp_path_factory.mktemp("misbehaving")
    servers = {mode: Misbehaving(tmp, mode) for mode in ("slow", "error500", "garbage")}
    yield servers
    for server in servers.values():
        server.stop()
