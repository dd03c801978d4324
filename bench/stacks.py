"""Starting parley as processes for benchmarks: `serve`, or the split stack (`api` + `worker`
on Postgres and Redis). Shared by `bench/relay.py` and `bench/gateway.py`.

Processes run ``python -m parley`` with this interpreter and the caller's environment minus
any ``PARLEY_*`` variable (what a benchmark wants it passes itself), so ``PYTHONPATH`` picks
the tree under test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

# a database of the benchmarks' own (made if missing): never one a test suite truncates
POSTGRES_URL = os.environ.get(
    "PARLEY_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1/parley_bench"
)
REDIS_URL = os.environ.get("PARLEY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

# A tier no benchmark's load runs into.
BENCH_TIERS = """
default_tier = "bench"
[tiers.bench]
priority = 0
tokens_per_minute = 100000000
burst_tokens = 100000000
max_concurrent_runs = 100000
max_output_tokens = 8192
"""


def loop_runner() -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """How a benchmark's client runs: uvloop's loop when installed (lighter), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# a bench's clients sign up and sign in many users from one address: the proof-of-work
# that would bring on (accounts/challenge.py) is not what a bench measures (a bench that
# wants it, bench/abuse.py say, passes its own values)
NO_CHALLENGE = {
    f"PARLEY_ACCOUNTS__{name}": "1000000"
    for name in (
        "SIGNUP_CHALLENGE_AFTER",
        "CHALLENGE_AFTER_FAILURES",
        "CHALLENGE_AFTER_EMAIL_FAILURES",
        "CHALLENGE_AFTER_ADDRESS_FAILURES",
    )
}


class Proc:
    """A child process, its output to ``log``; ``argv`` defaults to ``python -m parley``."""

    def __init__(
        self, args: list[str], env: dict[str, str], log: Path, *, argv: list[str] | None = None
    ) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
        self.log = log
        self._log = log.open("wb")
        command = argv if argv is not None else [sys.executable, "-m", "parley"]
        if argv is None:
            command += ["--log-level", "WARNING"]
        self.proc = subprocess.Popen(
            [*command, *args],
            env={**base, **NO_CHALLENGE, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        self._log.flush()
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_ready(url: str, timeout: float = 60, procs: tuple[Proc, ...] = ()) -> None:
    """Until ``url`` answers 200 (a bare origin means its ``/readyz``); fails early when one
    of ``procs`` has exited."""
    if urlsplit(url).path in ("", "/"):
        url = url.rstrip("/") + "/readyz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise SystemExit(f"{p.log.name} exited before {url} was ready:\n{p.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not become ready within {timeout:.0f} s")


@dataclass
class Stack:
    name: str
    base: str
    procs: list[Proc]
    roles: list[str]  # each process's part: serve, or api and worker

    def pids(self) -> dict[str, int]:
        return {role: p.proc.pid for role, p in zip(self.roles, self.procs, strict=True)}

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, every thread) process ``pid`` has used, from /proc."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {role: cpu_seconds(pid) for role, pid in pids.items()}


class CpuTrace:
    """Each process's CPU seconds, sampled every ``every`` s while a load runs, so that the
    CPU spent within any window of it (``between``) can be read afterwards."""

    def __init__(self, pids: dict[str, int], every: float = 0.1) -> None:
        self.pids = pids
        self.every = every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CpuTrace:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.samples.append((time.perf_counter(), cpu_of(self.pids)))

    async def _sample(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), cpu_of(self.pids)))
            await asyncio.sleep(self.every)

    def between(self, begin: float, end: float) -> dict[str, float]:
        """CPU seconds of each process from ``begin`` to ``end`` (``time.perf_counter``),
        read from the samples nearest inside the window."""
        inside = [s for s in self.samples if begin <= s[0] <= end]
        if len(inside) < 2:
            return {}
        (t0, first), (t1, last) = inside[0], inside[-1]
        scale = (end - begin) / (t1 - t0) if t1 > t0 else 1.0
        return {role: (last[role] - first[role]) * scale for role in self.pids}


def start_stack(
    kind: str,
    env: dict[str, str],
    tmp: Path,
    *,
    args: list[str] | None = None,
    database_url: str = POSTGRES_URL,
    redis_url: str = REDIS_URL,
    redis_namespace: str | None = None,
) -> Stack:
    """``serve`` (SQLite in ``tmp``, in-process bus) or ``split`` (`api` + `worker`);
    ``args`` go to every process (e.g. ``["--config", path]``)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    extra = args or []
    if kind == "serve":
        data = tmp / f"serve-{port}"
        proc = Proc(
            ["serve", "--port", str(port), "--data-dir", str(data), *extra],
            env,
            data.with_suffix(".log"),
        )
        try:
            wait_ready(base, procs=(proc,))
        except BaseException:
            proc.stop()
            raise
        return Stack("serve (SQLite, in-process bus)", base, [proc], ["serve"])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (the caller's loop may run)
        pool.submit(asyncio.run, ensure_database(database_url)).result()
    shared = {
        **env,
        "PARLEY_DATABASE_URL": database_url,
        "PARLEY_REDIS_URL": redis_url,
        "PARLEY_REDIS_NAMESPACE": redis_namespace or f"bench-{uuid.uuid4().hex[:8]}",
    }
    worker = Proc(["worker", *extra], shared, tmp / f"worker-{port}.log")
    api = Proc(["api", "--port", str(port), *extra], shared, tmp / f"api-{port}.log")
    stack = Stack("api + worker (Postgres, Redis)", base, [api, worker], ["api", "worker"])
    try:
        wait_ready(base, procs=(api, worker))
    except BaseException:
        stack.stop()
        raise
    return stack


async def ensure_database(url: str) -> None:
    """Create the Postgres database ``url`` names unless it exists (trust auth, as here)."""
    from sqlalchemy import text  # only the split stack needs these
    from sqlalchemy.ext.asyncio import create_async_engine

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name.replace("_", "").isalnum():
        raise SystemExit(f"unexpected database name {name!r} in {url}")
    admin = urlunsplit(parts._replace(scheme="postgresql+asyncpg", path="/postgres"))
    engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            query = text("SELECT 1 FROM pg_database WHERE datname = :name")
            if (await conn.execute(query, {"name": name})).scalar() is None:
                await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await engine.dispose()


def cpu() -> str:
    """The CPU's model, logical cores and the vector flags that matter to the engines (every
    benchmark prints them: machines of one kind differ from day to day)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
        "?",
    )
    flags = next(
        (ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []
    )
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_tile")
    cores = info.count("processor\t:")
    return f"{model}, {cores} logical cores; flags: {' '.join(f for f in wanted if f in flags)}"


PROFILES = Path(__file__).resolve().parents[1] / "build" / "profiles"


def py_spy() -> str:
    """py-spy (a sampling profiler, not a dependency of parley): on PATH, or installed into
    build/tools by ``bench/peers/py_spy.sh``."""
    found = shutil.which("py-spy") or str(PROFILES.parents[0] / "tools" / "bin" / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: run bench/peers/py_spy.sh")
    return found


def profile(pids: dict[str, int], seconds: float, name: str) -> list[subprocess.Popen[bytes]]:
    """Start py-spy on each process for ``seconds``: a flame graph (SVG) and the collapsed
    stacks (text, for reading where the time goes) under build/profiles/, named
    ``{name}-{role}``. Returns the recorders (wait for them)."""
    PROFILES.mkdir(parents=True, exist_ok=True)
    recorders = []
    for role, pid in pids.items():
        for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
            out = PROFILES / f"{name}-{role}.{suffix}"
            argv = [py_spy(), "record", "--pid", str(pid), "--duration", str(int(seconds))]
            argv += ["--rate", "250", "--nonblocking", "--format", fmt, "--output", str(out)]
            recorders.append(
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
    return recorders
