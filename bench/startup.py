"""Start-up time and resident memory of parley with the built-in engine, beside llama-server.

    .venv/bin/python bench/startup.py [--precisions fp32,bf16,int8,int4,w8a8] [--rounds 2]
        [--no-peer]

For each precision, ``parley engine serve --engine builtin`` and ``parley serve --engine
builtin`` (the whole embedded service: SQLite in a temporary folder, the web UI, the worker)
are started ``--rounds`` times, and for each start: seconds from the process's launch to the
first ``200`` of ``GET /health`` (``/readyz`` for ``serve``; polled every 20 ms), and the
resident memory (RSS, MB) one second after that, for the engine servers (parley's and
llama-server) after answering one chat completion (the weights are memory-mapped: a page
is resident once read). The first start of a precision may build its weights (the built-weights
cache, ``~/.cache/parley/models/*-<precision>-b*.safetensors``: ``--cold`` deletes them
first); later starts map them. llama.cpp's ``llama-server`` (the bundled Q4_1 GGUF, 2
threads, 64 slots of 1,024 tokens; built by ``bench/peers/llama_server.sh``) is started the
same way for comparison when it is built. Prints one table and the CPU flags.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from peer_servers import free_port, session_rss_mb
from stacks import cpu

ROOT = Path(__file__).resolve().parent.parent
PARLEY = ROOT / ".venv" / "bin" / "parley"
LLAMA = ROOT / "bench" / "peers" / "llama_server.sh"
NOAMX = ROOT / "build" / "peers" / "llama-server-noamx"
CACHE = Path("~/.cache/parley/models").expanduser()


def measure(
    argv: list[str], env: dict[str, str], port: int, path: str = "/health", answer: bool = False
) -> tuple[float, float]:
    """Seconds to the first 200 of ``path``, and RSS (MB) a second later (after answering one
    chat completion first, with ``answer``: every weight page then touched)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        with httpx.Client(timeout=1) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {proc.returncode}")
                try:
                    if client.get(f"http://127.0.0.1:{port}{path}").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.perf_counter() - started > 300:
                    raise TimeoutError(f"{argv} not healthy in 300 s")
                time.sleep(0.02)
        ready = time.perf_counter() - started
        if answer:
            answer_once(port)
        time.sleep(1)
        return ready, session_rss_mb(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


def answer_once(port: int) -> None:
    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
    body = {
        "model": models["data"][0]["id"],
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 8,
    }
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    httpx.post(url, json=body, timeout=120).raise_for_status()


def parley_argv(command: str, port: int, data: Path) -> list[str]:
    if command == "engine serve":
        return [str(PARLEY), "engine", "serve", "--engine", "builtin", "--port", str(port)]
    return [
        str(PARLEY), "serve", "--engine", "builtin", "--port", str(port), "--data-dir", str(data),
    ]  # fmt: skip


def run_parley(precision: str, command: str, rounds: int) -> list[tuple[float, float]]:
    results = []
    for _ in range(rounds):
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="parley-startup-") as data:
            env = dict(os.environ, PARLEY_BUILTIN_ENGINE__PRECISION=precision)
            env.setdefault("HF_HUB_OFFLINE", "1")
            engine = command == "engine serve"
            argv = parley_argv(command, port, Path(data))
            results.append(measure(argv, env, port, "/health" if engine else "/readyz", engine))
    return results


def run_llama(rounds: int) -> list[tuple[float, float]]:
    results = []
    for _ in range(rounds):
        port = free_port()
        env = dict(os.environ, LLAMA_THREADS="2", LLAMA_SLOTS="64", LLAMA_CTX_PER_SLOT="1024")
        if NOAMX.exists():  # ggml's AMX matmul crashes on quantized GGUFs on AMX CPUs
            env["LLAMA_BIN"] = str(NOAMX)
        results.append(measure([str(LLAMA), "serve", str(port)], env, port, answer=True))
    return results


def row(label: str, results: list[tuple[float, float]]) -> str:
    ready = " / ".join(f"{r:.2f}" for r, _ in results)
    rss = statistics.median(m for _, m in results)
    return f"| {label} | {ready} | {rss:,.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--precisions", default="fp32,bf16,int8,int4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="delete the built-weights caches")
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    print(cpu())
    if args.cold:
        for file in CACHE.glob("*-b[0-9]*.safetensors"):
            file.unlink()
    print("| server | seconds to healthy, each start | RSS MB (median; engines: after an answer) |")
    print("| --- | --- | --- |")
    for precision in args.precisions.split(","):
        for command in ("engine serve", "serve"):
            label = f"parley {command} --engine builtin, {precision}"
            print(row(label, run_parley(precision, command, args.rounds)), flush=True)
    built = (ROOT / "build" / "peers" / "llama-server").exists()
    if not args.no_peer and built:
        print(row("llama-server (Q4_1 GGUF as shipped)", run_llama(args.rounds)), flush=True)


if __name__ == "__main__":
    main()
