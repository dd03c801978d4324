"""The fleet's servers as real processes: ``parley engine serve`` replicas and misbehaving
OpenAI-compatible servers (``tests.fleet.misbehaving``)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.certificates import self_signed
from tests.processes import Parley, free_port
from tests.waiting import GaveUp, eventually_sync

REPO = Path(__file__).resolve().parents[2]


class EngineReplica:
    """``parley engine serve --engine fake`` on a port of its own; it can die and come back
    on the same port."""

    def __init__(self, tmp: Path, name: str, **fake: float) -> None:
        self.tmp = tmp
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        pace: dict[str, float] = {
            "time_to_first_token_ms": 10,
            "inter_token_latency_ms": 5,
            "output_tokens": 12,
        }
        pace.update(fake)
        self.env = {f"PARLEY_FAKE_ENGINE__{k.upper()}": str(v) for k, v in pace.items()}
        self.env["PARLEY_FAKE_ENGINE__SLOTS"] = "16"
        self.proc: Parley | None = None
        self.start()

    def start(self) -> None:
        args = ["engine", "serve", "--engine", "fake", "--port", str(self.port)]
        self.proc = Parley(args, self.env, self.tmp / f"{self.name}-{self.port}.log")
        self.proc.wait_log("engine serving")
        eventually_sync(self._answers, f"{self.name}'s /health")

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.base}/health", timeout=5).json()
        return body

    def in_flight(self) -> int:
        return int(self.health()["in_flight"])

    def served(self) -> int:
        return int(self.health()["served"])

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


class Misbehaving:
    """``python -m tests.fleet.misbehaving MODE PORT [CERT KEY]``; with ``tls``, over HTTPS
    with a certificate of its own (``cert``: trust it by that file)."""

    def __init__(self, tmp: Path, mode: str, *, tls: bool = False) -> None:
        self.mode = mode
        self.port = free_port()
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        self.log = tmp / f"misbehaving-{mode}-{self.port}.log"
        self.cert = tmp / f"misbehaving-{self.port}.pem"
        self._verify: ssl.SSLContext | bool = True
        args = [mode, str(self.port)]
        if tls:
            key = tmp / f"misbehaving-{self.port}.key"
            self_signed(self.cert, key)
            self._verify = ssl.create_default_context(cafile=self.cert)
            args += [str(self.cert), str(key)]
        self._out = self.log.open("wb")
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fleet.misbehaving", *args],
            env={**os.environ, "PYTHONPATH": path},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        try:
            eventually_sync(self._answers, f"the {mode} server to listen")
        except GaveUp as e:
            raise GaveUp(f"{e}:\n{self.log.read_text()}") from None

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the {self.mode} server exited:\n{self.log.read_text()}")
        try:
            return self._get("/v1/models", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def requests(self) -> int:
        return int(self._get("/count").json()["requests"])

    def client_ports(self) -> list[int]:
        """The client port of each chat request: a new port is a new connection."""
        return [int(p) for p in self._get("/count").json()["client_ports"]]

    def last_body(self) -> dict[str, Any]:
        """The JSON body of the last chat request it received."""
        body: dict[str, Any] = self._get("/count").json()["body"]
        return body

    def authorization(self) -> str | None:
        said: str | None = self._get("/count").json()["authorization"]
        return said

    def traceparent(self) -> str | None:
        """The ``traceparent`` header of the last chat request."""
        said: str | None = self._get("/count").json()["traceparent"]
        return said

    def _get(self, path: str, timeout: float = 5) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", timeout=timeout, verify=self._verify)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._out.close()
