"""Running parley commands as real processes in tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.builders import ROOMY_TIERS
from tests.waiting import GaveUp, eventually_sync


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _passed(name: str) -> bool:
    """The test run's environment, but parley's settings: only the proof-of-work's thresholds
    the suite sets for itself (tests/conftest.py) pass."""
    return not name.startswith("PARLEY_") or "CHALLENGE" in name


class Parley:
    """One `parley …` process; its output goes to a log file for failure reports."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        base = {k: v for k, v in os.environ.items() if _passed(k)}
        base["PARLEY_TIERS"] = json.dumps(ROOMY_TIERS)  # unless the test sets tiers
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "parley", *args],
            env={**base, **env},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, base_url: str, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"parley exited early:\n{self.output()}")
            try:
                return httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        self._wait(ready, f"{base_url}/readyz to answer 200", timeout)

    def wait_log(self, needle: str, timeout: float = 30) -> None:
        def logged() -> bool:
            if needle in self.output():
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"exited without logging {needle!r}:\n{self.output()}")
            return False

        self._wait(logged, f"the log line {needle!r}", timeout)

    def _wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        try:
            eventually_sync(check, what, timeout=timeout)
        except GaveUp as e:
            raise GaveUp(f"{e}; the process's output:\n{self.output()}") from None

    def kill(self) -> None:
        """SIGKILL: no cleanup, as in a crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()


class Cluster:
    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.procs: list[Parley] = []

    def api(self) -> tuple[Parley, str]:
        port = free_port()
        proc = Parley(["api", "--port", str(port)], self.env, self.tmp / f"api-{port}.log")
        self.procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        proc.wait_ready(base)
        return proc, base

    def worker(self, **env: str) -> Parley:
        n = len(self.procs)
        proc = Parley(["worker"], {**self.env, **env}, self.tmp / f"worker-{n}.log")
        self.procs.append(proc)
        proc.wait_log("taking runs")
        return proc


def cluster_env(postgres_url: str, redis_url: str, **settings: str) -> dict[str, str]:
    """The environment of a split stack's processes (Postgres, Redis under a namespace of
    its own, the fake engine), with ``settings`` (``PARLEY_*`` names) over the defaults."""
    return {
        "PARLEY_DATABASE_URL": postgres_url,
        "PARLEY_REDIS_URL": redis_url,
        "PARLEY_REDIS_NAMESPACE": f"test-{uuid.uuid4().hex[:10]}",
        "PARLEY_ENGINE": "fake",
        "PARLEY_LEASE_SECONDS": "2",
        "PARLEY_SWEEP_INTERVAL_SECONDS": "0.5",
        **settings,
    }
