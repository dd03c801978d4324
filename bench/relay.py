"""What parley adds on top of its engine, and how many streams one process relays.

    python bench/relay.py [--requests 200] [--tokens 64] [--stacks serve,split]

Part 1, in one run: the fake engine with zero delays read in-process (the floor)
vs. the same engine behind parley over HTTP/SSE, one request at a time. Prints time
to first token (p50/p99) of each, the time parley adds, and the per-token relay
cost. ``serve`` is the embedded default (SQLite, in-process bus, one process);
``split`` is `parley api` + `parley worker` on Postgres and Redis.

Part 2: one `parley serve` process (``--load-stacks serve``), or one `parley api` and
one `parley worker` on Postgres (database ``parley_bench``, made if missing) and Redis
(``split``), the fake engine at one token per 50 ms; open N concurrent streams (each a new
message in a chat of its own, started at ``--arrivals`` a second, default 100) and measure
the gaps between tokens as the client sees them. Prints the inter-token p50/p99 at each N
and the largest N whose p99 stays within 100 ms. ``--compare-batching``: each level twice,
the worker's appends to Redis one round trip each (``stream_append_batching`` false), then
batched (true), side by side. The load comes from this process over raw sockets (a light
client, so the client is not the bottleneck measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from stacks import (
    BENCH_TIERS,
    REDIS_URL,
    CpuTrace,
    Proc,
    Stack,
    free_port,
    pct,
    profile,
    start_stack,
    wait_ready,
)

from parley.engines.fake import FakeEngine, FakeEngineConfig
from parley.engines.interface import ChatMessage, GenerationRequest


def engine_env(ttft_ms: float, itl_ms: float, tokens: int, slots: int) -> dict[str, str]:
    config = Path(tempfile.gettempdir()) / f"parley-bench-{os.getpid()}.toml"
    config.write_text(BENCH_TIERS)
    return {
        "PARLEY_CONFIG_FILE": str(config),
        "PARLEY_ENGINE": "fake",
        "PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS": str(ttft_ms),
        "PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS": str(itl_ms),
        "PARLEY_FAKE_ENGINE__OUTPUT_TOKENS": str(tokens),
        "PARLEY_FAKE_ENGINE__SLOTS": str(slots),
        "PARLEY_MAX_OPEN_STREAMS_PER_USER": "100000",
        "PARLEY_QUEUE_MAX": "100000",
        "PARLEY_DEFAULT_MAX_TOKENS": str(max(tokens, 1)),
    }


async def login(base: str) -> tuple[dict[str, str], str]:
    async with httpx.AsyncClient(base_url=base) as c:
        email = f"bench-{uuid.uuid4().hex[:8]}@example.com"
        r = await c.post("/api/auth/signup", json={"email": email, "password": "bench password"})
        r.raise_for_status()
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        chat = (await c.post("/api/chats", json={}, headers=auth)).json()["id"]
        return auth, chat


# -- part 1: overhead ---------------------------------------------------------------------


async def engine_in_process(n: int, tokens: int) -> tuple[list[float], list[float]]:
    engine = FakeEngine(FakeEngineConfig(0, 0, tokens, slots=1))
    ttfts, per_token = [], []
    for i in range(n):
        req = GenerationRequest(f"r{i}", "parley-fake", [ChatMessage("user", f"q {i}")], tokens)
        start = time.perf_counter()
        first = last = start
        count = 0
        async for _ in engine.stream(req):
            last = time.perf_counter()
            if count == 0:
                first = last
            count += 1
        ttfts.append(first - start)
        per_token.append((last - first) / max(1, count - 1))
    return ttfts, per_token


async def through_parley(base: str, n: int) -> tuple[list[float], list[float]]:
    auth, chat = await login(base)
    ttfts, per_token = [], []
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        for i in range(n):
            start = time.perf_counter()
            first = last = start
            count = 0
            async with c.stream(
                "POST", f"/api/chats/{chat}/messages", json={"content": f"q {i}"}, headers=auth
            ) as r:
                async for line in r.aiter_lines():
                    if line == "event: delta":
                        last = time.perf_counter()
                        if count == 0:
                            first = last
                        count += 1
                    elif line == "event: done":
                        break
            ttfts.append(first - start)
            per_token.append((last - first) / max(1, count - 1))
    return ttfts, per_token


def ms(v: float) -> str:
    return f"{v * 1000:8.3f}"


async def part1(stacks: list[str], n: int, tokens: int, tmp: Path) -> None:
    print(f"\n## Part 1: overhead, {n} requests one at a time, {tokens} tokens each, zero delays\n")
    base_ttft, base_tok = await engine_in_process(n, tokens)
    rows = [("fake engine in-process", base_ttft, base_tok)]
    for kind in stacks:
        stack = start_stack(kind, engine_env(0, 0, tokens, 64), tmp)
        try:
            await through_parley(stack.base, 10)  # warm-up
            ttft, tok = await through_parley(stack.base, n)
            rows.append((stack.name, ttft, tok))
        finally:
            stack.stop()
    print(f"| {'path':34} | TTFT p50 ms | TTFT p99 ms | per token p50 ms | per token p99 ms |")
    print(f"|{'-' * 36}|-------------|-------------|------------------|------------------|")
    for name, ttft, tok in rows:
        print(
            f"| {name:34} | {ms(pct(ttft, 50))}    | {ms(pct(ttft, 99))}    |"
            f" {ms(pct(tok, 50))}         | {ms(pct(tok, 99))}         |"
        )
    print()
    for name, ttft, tok in rows[1:]:
        added50 = pct(ttft, 50) - pct(base_ttft, 50)
        added99 = pct(ttft, 99) - pct(base_ttft, 99)
        relay = statistics.median(tok) - statistics.median(base_tok)
        print(
            f"{name}: parley adds {added50 * 1000:.2f} ms (p50) / {added99 * 1000:.2f} ms (p99)"
            f" to the time to first token; relaying costs {relay * 1e6:.0f} µs per token"
        )


# -- part 2: concurrent streams -----------------------------------------------------------


async def one_stream(
    host: str,
    port: int,
    path: str,
    body: bytes,
    token: str,
    marks: list[tuple[float, float]],
    tally: Counter[str] | None = None,
) -> tuple[float | None, float | None]:
    """One SSE stream over a raw socket; appends (time, gap) per token; returns the times
    of its first token and of its end. ``tally`` counts how streams went: ``flowing`` at
    the first token, then ``done``, ``cut`` (ended without ``done``) or the HTTP status
    line of a refusal."""
    tally = tally if tally is not None else Counter()
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Accept: text/event-stream\r\nConnection: close\r\n\r\n"
    ).encode() + body
    writer.write(request)
    await writer.drain()
    first: float | None = None
    last: float | None = None
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                tally["cut"] += 1
                return first, None
            now = time.perf_counter()
            if (
                first is None
                and last is None
                and chunk.startswith(b"HTTP/1.1 ")
                and not (chunk.startswith(b"HTTP/1.1 200"))
            ):
                code = re.search(rb'"message":\s*"([^"(;]+)', chunk) or re.search(
                    rb'"code":\s*"([a-z_]+)"', chunk
                )
                said = chunk.split(b"\r\n", 1)[0].decode()
                tally[f"{said} {code[1].decode()}" if code else said] += 1
                return None, None
            n = chunk.count(b"event: delta")
            if n:
                if last is not None:
                    marks.append((now, now - last))
                marks.extend([(now, 0.0)] * (n - 1))  # arrived together: no gap between
                if first is None:
                    first = now
                    tally["flowing"] += 1
                last = now
            if b"event: done" in chunk:
                tally["done"] += 1
                return first, now
    finally:
        writer.close()


async def new_chats(base: str, auth: dict[str, str], n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60) as c:
        gate = asyncio.Semaphore(16)

        async def one() -> str:
            async with gate:
                r = await c.post("/api/chats", json={})
                r.raise_for_status()
                chat_id: str = r.json()["id"]
                return chat_id

        return list(await asyncio.gather(*(one() for _ in range(n))))


@dataclass
class Step:
    gaps: list[float]  # between tokens, while every stream flowed
    completed: int
    cpu_per_token: dict[str, float]  # each process's CPU seconds per token delivered then


async def load_step(stack: Stack, streams: int, ramp: float, profiled: str = "") -> Step:
    """Gaps between tokens while every stream is flowing: after the last stream's first
    token and before the first stream's end (start-up and settling are Part 1's cost), and
    the CPU each process of the stack spent in that window per token delivered in it.
    Each stream is a message in a chat of its own (one user's): N conversations at once,
    not N answers queued in one chat whose history grows with each."""
    base = stack.base
    auth, _ = await login(base)
    chats = await new_chats(base, auth, streams)
    token = auth["Authorization"].split()[1]
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"content": "load"}).encode()
    marks: list[tuple[float, float]] = []
    tally: Counter[str] = Counter()

    async def start(i: int) -> tuple[float | None, float | None]:
        await asyncio.sleep(ramp * i / streams)
        path = f"/api/chats/{chats[i]}/messages"
        return await one_stream(host, int(port), path, body, token, marks, tally)

    async def record() -> None:  # once (nearly) every stream flows, for 10 s (``--profile``)
        def answered() -> int:
            return tally["flowing"] + sum(n for k, n in tally.items() if k.startswith("HTTP"))

        while answered() < 0.95 * streams:  # noqa: ASYNC110 (polls the load's own tally)
            await asyncio.sleep(0.2)
        recorders = profile(stack.pids(), 10, profiled)
        await asyncio.to_thread(lambda: [r.wait() for r in recorders])

    recording = asyncio.create_task(record()) if profiled else None
    async with CpuTrace(stack.pids()) as trace:
        results = await asyncio.gather(*(start(i) for i in range(streams)), return_exceptions=True)
    if recording is not None:
        await recording
    spans = [r for r in results if isinstance(r, tuple) and r[0] is not None and r[1] is not None]
    if set(tally) - {"flowing", "done"}:
        print(f"  ({stack.name}, {streams} streams: {dict(tally)})")
    if not spans:
        return Step([], 0, {})
    begin = max(f for f, _ in spans if f is not None)
    end = min(e for _, e in spans if e is not None)
    inside = [gap for at, gap in marks if begin < at <= end]
    cpu = trace.between(begin, end)
    per_token = {role: seconds / len(inside) for role, seconds in cpu.items()} if inside else {}
    return Step(inside, len(spans), per_token)


def start_bare(tokens: int, tmp: Path) -> Stack:
    """bench/bare_relay.py's relay and producer, as processes, on the bench's Redis."""
    port = free_port()
    namespace = f"bare-{uuid.uuid4().hex[:8]}"
    script = [sys.executable, str(Path(__file__).with_name("bare_relay.py"))]
    common = ["--redis", REDIS_URL, "--namespace", namespace]
    producer = Proc(
        ["producer", *common, "--tokens", str(tokens)], {}, tmp / "bare-producer.log", argv=script
    )
    relay = Proc(["relay", "--port", str(port), *common], {}, tmp / "bare-relay.log", argv=script)
    base = f"http://127.0.0.1:{port}"
    stack = Stack("bare relay", base, [relay, producer], ["relay", "producer"])
    try:
        wait_ready(stack.base, procs=(relay, producer))
    except BaseException:
        stack.stop()
        raise
    return stack


async def part2(
    kind: str,
    levels: list[int],
    tokens: int,
    tmp: Path,
    *,
    compare: bool,
    arrivals: float,
    profiled: bool = False,
) -> None:
    title = {
        "serve": "one `parley serve` process",
        "split": "one `parley api` + a worker",
        "bare": "the bare relay (bench/bare_relay.py: Redis to SSE, no durability, auth or"
        " accounting) + its producer",
    }[kind]
    print(
        f"\n## Part 2: {title}, streams at 1 token / 50 ms, {tokens} + N/2 tokens each,"
        f" {arrivals:g} new a second\n"
    )
    modes = [("off", "false"), ("on", "true")] if compare else [("on", "true")]
    print(
        "| streams | append batching | completed | inter-token p50 ms | p99 ms | max ms"
        " | CPU µs per token delivered, by process |"
    )
    print("|---|---|---|---|---|---|---|")
    best = {name: 0 for name, _ in modes}
    going = dict.fromkeys(best, True)
    for streams in levels:
        for name, flag in modes:
            if not going[name]:
                continue
            # every stream must still be flowing when the last one starts: longer at higher N
            length = tokens + streams // 2
            env = {**engine_env(0, 50, length, 100_000), "PARLEY_STREAM_APPEND_BATCHING": flag}
            stack = start_bare(length, tmp) if kind == "bare" else start_stack(kind, env, tmp)
            try:
                # new conversations at ``arrivals`` a second (100: over three times the rate
                # that keeps N streams of the default length going, N / duration by Little's
                # law); all flow at once for most of their length
                named = f"relay-{kind}-{streams}" if profiled else ""
                step = await load_step(stack, streams, ramp=streams / arrivals, profiled=named)
            finally:
                stack.stop()
            gaps, completed = step.gaps, step.completed
            if not gaps:
                print(f"| {streams:7} | {name:15} | {completed:9} | — | — | — | — |")
                going[name] = compare  # (compared: every level of both, whatever happens)
                continue
            p99 = pct(gaps, 99)
            cpu = ", ".join(f"{role} {v * 1e6:.1f}" for role, v in step.cpu_per_token.items())
            print(
                f"| {streams:7} | {name:15} | {completed:9} | {ms(pct(gaps, 50))}           |"
                f" {ms(p99)} | {ms(max(gaps))} | {cpu} |",
                flush=True,
            )
            if p99 <= 0.100 and completed == streams:
                best[name] = streams
            elif not compare:
                going[name] = False
    for name, held in best.items():
        batching = f" (append batching {name})" if compare else ""
        print(f"\n{title}{batching} holds {held} concurrent streams with inter-token p99 <= 100 ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--stacks", default="serve,split")
    parser.add_argument("--levels", default="50,100,200,400,800,1200,1600")
    parser.add_argument("--load-tokens", type=int, default=160)
    parser.add_argument(
        "--arrivals",
        type=float,
        default=100,
        help="part 2: new conversations a second while the streams ramp up",
    )
    parser.add_argument(
        "--load-stacks",
        default="serve,split,bare",
        help="part 2: serve, split, and bare (the floor: bench/bare_relay.py)",
    )
    parser.add_argument("--skip", choices=["part1", "part2"])
    parser.add_argument(
        "--compare-batching",
        action="store_true",
        help="part 2 at every level with the worker's append batching off, then on",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="part 2: py-spy on each process for 10 s of each level (build/profiles/; its"
        " CPU figures are then not the ones to quote)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.skip != "part1":
            asyncio.run(part1(args.stacks.split(","), args.requests, args.tokens, Path(tmp)))
        if args.skip != "part2":
            levels = [int(x) for x in args.levels.split(",")]
            for kind in args.load_stacks.split(","):
                compare = args.compare_batching
                tokens, arrivals = args.load_tokens, args.arrivals
                run = part2(
                    kind,
                    levels,
                    tokens,
                    Path(tmp),
                    compare=compare,
                    arrivals=arrivals,
                    profiled=args.profile,
                )
                asyncio.run(run)


if __name__ == "__main__":
    main()
