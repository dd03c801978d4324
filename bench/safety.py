"""What moderation costs: time to first token and throughput with the rule set, and with a
moderation endpoint, vs. no moderation, side by side in one run.

    python bench/safety.py [--requests 100] [--streams 16] [--per-stream 8] [--tokens 64]
                           [--rounds 3] [--window 16]

Three ``parley serve`` processes (SQLite, in-process bus, the fake engine with zero delays,
so parley's own work is all there is to measure) differ only in their tier's moderation:

* ``none``: no classifier on prompts or answers;
* ``rules``: the built-in rule set on both, with a realistic set of categories (12, 60
  patterns) and the prompt-injection heuristics;
* ``endpoint``: a moderation endpoint on both (``parley engine serve --engine fake``'s
  ``/v1/moderations`` on this machine, answering with the same rule set), answers checked
  every ``--window`` tokens.

Each round measures every variant in turn (interleaved: the machine is shared and noisy):

* time to first token, as the client sees it (POST to first ``delta``), ``--requests``
  requests one at a time, interleaved request by request across the variants;
* throughput: ``--streams`` concurrent streams, each sending ``--per-stream`` messages one
  after the other (every message in a chat of its own); answer tokens delivered per second
  of wall time, and per CPU second the ``parley serve`` process used (this machine is shared:
  the wall figure moves with whatever else runs, the CPU figure much less; the endpoint's
  own process is not counted in it, as a hosted endpoint would not be).

Prints each variant's TTFT p50/p90 and throughput (the median of the rounds), and the rule
set's and the endpoint's difference to ``none``. Also, in-process: one rule-set check of a
prompt, and one streaming scan of an answer's piece, in µs. And the CPU it ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from stacks import BENCH_TIERS, Proc, cpu, free_port, loop_runner, pct, wait_ready

from parley.engines.fake import FakeEngineConfig, fake_text
from parley.engines.interface import ChatMessage
from parley.safety.interface import Sample, Stage
from parley.safety.rules import RuleSet
from parley.safety.settings import RuleCategory, RulesSettings

VARIANTS = ("none", "rules", "endpoint")

# a realistic rule set: twelve categories of five phrases (none in the fake engine's words)
CATEGORY_NAMES = (
    "violence weapons self_harm hate harassment sexual_minors drugs fraud malware "
    "extremism privacy secrets"
).split()


def bench_categories() -> dict[str, list[str]]:
    return {
        name: [rf"\b{name} phrase {i} (?:alpha|beta|gamma)\b" for i in range(4)]
        + [rf"\b{name}-marker-\d+\b"]
        for name in CATEGORY_NAMES
    }


def rules_toml(name: str) -> str:
    lines = [f"[safety.classifiers.{name}]", 'kind = "rules"']
    for category, patterns in bench_categories().items():
        lines.append(f"[safety.classifiers.{name}.categories.{category}]")
        lines.append(f"patterns = {json.dumps(patterns)}")
    return "\n".join(lines) + "\n"


def config(variant: str, endpoint_url: str, window: int) -> str:
    chosen = {"none": [], "rules": ["rules"], "endpoint": ["mod"]}[variant]
    toml = (
        BENCH_TIERS
        + f"moderation = {{ input = {json.dumps(chosen)}, output = {json.dumps(chosen)} }}\n"
    )
    toml += f"[safety]\nwindow_tokens = {window}\n" + rules_toml("rules")
    toml += f'[safety.classifiers.mod]\nkind = "endpoint"\nbase_url = "{endpoint_url}"\n'
    return toml


def engine_env(tokens: int) -> dict[str, str]:
    return {
        "PARLEY_ENGINE": "fake",
        "PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS": "0",
        "PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS": "0",
        "PARLEY_FAKE_ENGINE__OUTPUT_TOKENS": str(tokens),
        "PARLEY_FAKE_ENGINE__SLOTS": "64",
        "PARLEY_MAX_OPEN_STREAMS_PER_USER": "100000",
        "PARLEY_QUEUE_MAX": "100000",
        "PARLEY_DEFAULT_MAX_TOKENS": str(tokens),
    }


def start_endpoint(tmp: Path) -> tuple[Proc, str]:
    """The moderation endpoint: ``parley engine serve``'s ``/v1/moderations``."""
    port = free_port()
    (tmp / "endpoint.toml").write_text(rules_toml("rules"))
    env = {"PARLEY_CONFIG_FILE": str(tmp / "endpoint.toml"), "PARLEY_ENGINE": "fake"}
    proc = Proc(["engine", "serve", "--port", str(port)], env, tmp / "endpoint.log")
    wait_ready(f"http://127.0.0.1:{port}/health", procs=(proc,))
    return proc, f"http://127.0.0.1:{port}/v1"


def start_serve(
    variant: str, endpoint_url: str, args: argparse.Namespace, tmp: Path
) -> tuple[Proc, str]:
    port = free_port()
    path = tmp / f"{variant}.toml"
    path.write_text(config(variant, endpoint_url, args.window))
    env = {**engine_env(args.tokens), "PARLEY_CONFIG_FILE": str(path)}
    data = tmp / f"data-{variant}"
    proc = Proc(
        ["serve", "--port", str(port), "--data-dir", str(data)], env, tmp / f"{variant}.log"
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, procs=(proc,))
    return proc, base


async def login(client: httpx.AsyncClient, base: str) -> dict[str, str]:
    email = f"bench-{uuid.uuid4().hex[:8]}@example.com"
    body = {"email": email, "password": "bench password"}
    r = await client.post(f"{base}/api/auth/signup", json=body)
    r.raise_for_status()
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def one(
    client: httpx.AsyncClient, base: str, auth: dict[str, str], content: str
) -> tuple[float, int]:
    """One message in a chat of its own: (time to first delta, answer tokens)."""
    chat = (await client.post(f"{base}/api/chats", json={}, headers=auth)).json()["id"]
    start = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with client.stream(
        "POST", f"{base}/api/chats/{chat}/messages", json={"content": content}, headers=auth
    ) as r:
        r.raise_for_status()
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "delta":
                first = first if first is not None else time.perf_counter()
                tokens += json.loads(line[6:])["tokens"]
            elif event == "done":
                break
    assert first is not None, "no delta"
    return first - start, tokens


async def ttfts(bases: dict[str, str], n: int) -> dict[str, list[float]]:
    """Each variant's time to first token, ``n`` requests one at a time, interleaved request
    by request (whatever else the machine does lands on every variant alike)."""
    found: dict[str, list[float]] = {v: [] for v in bases}
    async with httpx.AsyncClient(timeout=60) as client:
        auths = {v: await login(client, base) for v, base in bases.items()}
        for i in range(n):
            for v, base in bases.items():
                ttft, _ = await one(client, base, auths[v], f"tell me about rivers {i}")
                found[v].append(ttft)
    return found


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(base: str, pid: int, streams: int, per_stream: int) -> tuple[float, float]:
    """Answer tokens delivered per second by ``streams`` clients sending one after another,
    and per CPU second of the parley process (what it costs, whatever else runs)."""
    limits = httpx.Limits(max_connections=streams * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        auth = await login(client, base)

        async def sender(s: int) -> int:
            sent = [await one(client, base, auth, f"q {s} {i}") for i in range(per_stream)]
            return sum(tokens for _, tokens in sent)

        cpu, start = process_cpu(pid), time.perf_counter()
        tokens = sum(await asyncio.gather(*(sender(s) for s in range(streams))))
        wall, used = time.perf_counter() - start, process_cpu(pid) - cpu
        return tokens / wall, tokens / max(used, 1e-9)


def in_process(tokens: int) -> tuple[float, float]:
    """µs for one rule-set check of a prompt, and for one streaming scan of a piece."""
    settings = RulesSettings(
        categories={
            name: RuleCategory(patterns=patterns) for name, patterns in bench_categories().items()
        }
    )
    rules = RuleSet("rules", settings)
    prompt = Sample(
        "Can you tell me how rivers form and why some of them flood in spring? " * 3, Stage.INPUT
    )
    n = 5000
    start = time.perf_counter()
    for _ in range(n):
        rules.check_now(prompt)
    check = (time.perf_counter() - start) / n
    pieces = fake_text([ChatMessage("user", "q")], tokens, FakeEngineConfig())
    rounds = 200
    start = time.perf_counter()
    for _ in range(rounds):
        scan = rules.scan()
        assert scan is not None
        for piece in pieces:
            scan.feed(piece)
    scan_piece = (time.perf_counter() - start) / (rounds * len(pieces))
    return check * 1e6, scan_piece * 1e6


Results = dict[str, dict[str, list[float]]]


async def measure(args: argparse.Namespace, servers: dict[str, tuple[Proc, str]]) -> Results:
    bases = {v: base for v, (_, base) in servers.items()}
    results: Results = {v: {"ttft": [], "tput": [], "per_cpu": []} for v in VARIANTS}
    await ttfts(bases, 10)  # warm-up
    for r in range(args.rounds):
        for v, ttft in (await ttfts(bases, args.requests)).items():
            results[v]["ttft"] += ttft
        for v, (proc, base) in servers.items():
            tput, per_cpu = await throughput(base, proc.proc.pid, args.streams, args.per_stream)
            results[v]["tput"].append(tput)
            results[v]["per_cpu"].append(per_cpu)
        said = ", ".join(f"{v} {results[v]['per_cpu'][-1]:,.0f}" for v in VARIANTS)
        print(f"round {r + 1}/{args.rounds}: tokens per parley CPU second: {said}", flush=True)
    return results


def report(args: argparse.Namespace, results: Results) -> None:
    print(
        f"\n## TTFT ({args.requests} requests x {args.rounds} rounds a variant, one at a time, "
        f"interleaved) and throughput ({args.streams} streams x {args.per_stream} messages of "
        f"{args.tokens} tokens; median of {args.rounds} rounds)\n"
    )
    print("| moderation | TTFT p50 ms | TTFT p90 ms | tok/s (wall) | tok per parley CPU s |")
    print("|---|---|---|---|---|")
    summary = {}
    for v in VARIANTS:
        t = results[v]["ttft"]
        tput = statistics.median(results[v]["tput"])
        per_cpu = statistics.median(results[v]["per_cpu"])
        summary[v] = (pct(t, 50), pct(t, 90), tput, per_cpu)
        print(
            f"| {v} | {pct(t, 50) * 1000:.3f} | {pct(t, 90) * 1000:.3f} | {tput:,.0f} |"
            f" {per_cpu:,.0f} |"
        )
    none = summary["none"]
    print()
    for v in ("rules", "endpoint"):
        p50, p90, tput, per_cpu = summary[v]
        # each request was sent right after its "none" twin: the median of the differences
        # of such pairs is what the noise of a shared machine disturbs least
        paired = statistics.median(
            a - b for a, b in zip(results[v]["ttft"], results["none"]["ttft"], strict=True)
        )
        print(
            f"{v}: time to first token {paired * 1000:+.3f} ms (median of paired differences; "
            f"p50 {(p50 - none[0]) * 1000:+.3f} ms, p90 {(p90 - none[1]) * 1000:+.3f} ms); "
            f"throughput {per_cpu / none[3]:.3f}x of none per parley CPU second "
            f"({(1 - per_cpu / none[3]) * 100:+.1f}% lost), {tput / none[2]:.3f}x wall"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--per-stream", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=16)
    args = parser.parse_args()
    print(f"CPU: {cpu()}; load average {os.getloadavg()[0]:.1f} at the start")
    check, scan = in_process(args.tokens)
    print(
        f"in-process: one rule-set check of a 213-character prompt {check:.1f} µs; one "
        f"streaming scan of an answer's piece {scan:.2f} µs"
    )
    with tempfile.TemporaryDirectory(prefix="parley-bench-safety-") as tmp_name:
        tmp = Path(tmp_name)
        endpoint, url = start_endpoint(tmp)
        procs = [endpoint]
        try:
            servers = {}
            for variant in VARIANTS:
                servers[variant] = start_serve(variant, url, args, tmp)
                procs.append(servers[variant][0])
            report(args, loop_runner()(measure(args, servers)))
            print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
        finally:
            for proc in procs:
                proc.stop()


if __name__ == "__main__":
    main()
