"""parley's built-in engine vs. a third-party OpenAI-compatible server, both over HTTP.

    .venv/bin/python bench/engine_vs_peer.py [--peer llama-server|vllm] [--levels 1,8,32,64]
        [--max-tokens 64] [--requests N]

Starts the peer (``bench/peers/llama_server.sh serve PORT`` or ``bench/peers/vllm_cpu.sh
serve PORT``, both serving the bundled SmolLM2-135M-Instruct) and ``parley engine serve
--engine builtin``, then at each concurrency level sends the same streamed chat requests
(``bench/peers/openai_load.measure``: max(2 x level, 8) requests unless ``--requests``) to one
and then the other, alternating which goes first from level to level so a drift in the
machine's load does not always favour the same side. Prints one side-by-side table with the
ratio built-in ÷ peer (above 1: the built-in engine has more tokens/s, or a longer latency).
Servers' output goes to build/peers/logs/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from openai_load import first_model, measure, prompts, requests_for

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "build" / "peers" / "logs"
PEERS = {
    "llama-server": ROOT / "bench" / "peers" / "llama_server.sh",
    "vllm": ROOT / "bench" / "peers" / "vllm_cpu.sh",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process in its own session (so stopping it stops its children too)."""

    def __init__(self, label: str, argv: list[str], port: int) -> None:
        self.label = label
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{label}.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.model = ""

    async def ready(self, timeout: float) -> None:
        """Wait for ``GET /health`` to answer 200 (and the model list), or fail."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.label} exited ({self.proc.returncode}); see {self.log_path}"
                    )
                try:
                    if (
                        await client.get(f"http://127.0.0.1:{self.port}/health")
                    ).status_code == 200:
                        self.model = await first_model(self.base_url)
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(1)
        raise TimeoutError(f"{self.label} not healthy after {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def side_by_side(peer: str, rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        f"| level | metric | built-in | {peer} | built-in ÷ {peer} |",
        "|---|---|---|---|---|",
    ]
    metrics = [
        ("tokens/s", "tok_s", 1.0, ".1f"),
        ("TTFT p50 ms", "ttft_p50", 1e3, ".0f"),
        ("TTFT p99 ms", "ttft_p99", 1e3, ".0f"),
        ("ITL p50 ms", "itl_p50", 1e3, ".1f"),
        ("ITL p99 ms", "itl_p99", 1e3, ".1f"),
    ]
    for built, other in rows:
        n = built["concurrency"]
        for label, key, scale, fmt in metrics:
            b, p = built[key] * scale, other[key] * scale
            lines.append(f"| {n} | {label} | {b:{fmt}} | {p:{fmt}} | {ratio(b, p)} |")
        lines.append(
            f"| {n} | errors / requests | {built['errors']}/{built['requests']}"
            f" | {other['errors']}/{other['requests']} | |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    levels = [int(x) for x in args.levels.split(",")]
    peer_port, builtin_port = free_port(), free_port()
    python_bin = Path(sys.executable).parent
    builtin_argv = [str(python_bin / "parley"), "engine", "serve", "--engine", "builtin"]
    started = time.perf_counter()
    servers = [
        Server(args.peer, [str(PEERS[args.peer]), "serve", str(peer_port)], peer_port),
        Server(
            "builtin",
            [*builtin_argv, "--host", "127.0.0.1", "--port", str(builtin_port)],
            builtin_port,
        ),
    ]
    peer, builtin = servers
    try:
        for s in servers:
            await s.ready(args.startup_timeout)
            # one request first: lazy start-up work (allocation, compilation) stays unmeasured
            await measure(s.base_url, s.model, 1, prompts(1), args.max_tokens)
            print(
                f"{s.label} ready after {time.perf_counter() - started:.0f} s: {s.base_url}"
                f" model {s.model} (log {s.log_path})",
                flush=True,
            )
        rows = []
        for i, n in enumerate(levels):
            batch = prompts(requests_for(n, args.requests))
            order = [peer, builtin] if i % 2 == 0 else [builtin, peer]
            got = {}
            for s in order:
                got[s.label] = await measure(s.base_url, s.model, n, batch, args.max_tokens)
                r = got[s.label]
                print(
                    f"  level {n:>3} {s.label:<12} {r['tok_s']:7.1f} tok/s"
                    f" errors {r['errors']}/{r['requests']} ({r['elapsed_s']:.0f} s)"
                    + (f" first error: {r['first_error']}" if r["first_error"] else ""),
                    flush=True,
                )
            rows.append((got["builtin"], got[peer.label]))
    finally:
        for s in servers:
            s.stop()
    print(
        f"\n## built-in engine vs. {args.peer}, {args.max_tokens} output tokens per request"
        f" (run took {time.perf_counter() - started:.0f} s)\n"
    )
    print(side_by_side(args.peer, rows))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peer", choices=sorted(PEERS), default="llama-server")
    parser.add_argument("--levels", default="1,8,32,64")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--requests", type=int, default=None, help="per level (default max(2 x level, 8))"
    )
    parser.add_argument(
        "--startup-timeout", type=float, default=900, help="seconds; a first build takes longer"
    )
    args = parser.parse_args()
    # a SIGTERM ends the run through `finally`, so the servers it started are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
