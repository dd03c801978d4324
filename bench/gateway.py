"""What a gateway adds in front of a fast OpenAI-compatible upstream, side by side in one run.

    python bench/gateway.py [--requests 200] [--load-requests 1024] [--rounds 8]
                            [--targets direct,bare,asgi,asgi-httpx,serve,split,litellm]

An upstream that streams 32 tokens as fast as it can (`bench/fast_upstream.py`, its own
process) is reached

* ``direct``: the upstream itself;
* ``bare`` and ``asgi``: through ``bench/bare_proxy.py``, the floor of a gateway in Python
  (the upstream's bytes relayed as they come, nothing parsed, stored or counted): ``bare``
  with asyncio streams and HTTP by hand, ``asgi`` on uvicorn, Starlette and httpx over
  parley's upstream transport, the parts parley is built from (``asgi-httpx``: the same on
  httpx's own transport, not measured unless named);
* ``serve``: through parley's ``/v1/chat/completions`` in one ``parley serve`` process
  (SQLite, in-process bus), the upstream its one ``openai`` model's replica;
* ``split``: the same through ``parley api`` + ``parley worker`` on Postgres and Redis
  (a database and a Redis namespace of the benchmark's own);
* ``litellm``: through LiteLLM's proxy (``bench/peers/litellm.sh``; skipped, and said so,
  when it is not installed), an ``openai/`` model with the upstream as ``api_base``.

The load client is this process (every server is a process of its own): raw sockets,
HTTP/1.1 keep-alive, the same code and request for every target (``stream: true``,
``stream_options.include_usage``, ``max_tokens``, a bearer key). Per request: time to first
token (request written → first chunk with content), tokens (the usage chunk's, else content
chunks counted), and the text relayed, checked against what the upstream sent.

* concurrency 1: ``--requests`` sequential requests per target after ``--warmup``, in
  ``--rounds`` rounds, the targets taking turns within each round (order rotated): TTFT
  p50/p99 and what each adds over direct;
* concurrency 32: ``--load-requests`` per target, 32 in flight, in rounds the same way:
  tokens received per second of wall time, and its ratio to direct.

Goals (issue 11): parley ``serve`` adds ≤ 5 ms to the TTFT p50 and relays ≥ 0.5 x direct's
tokens/s at concurrency 32.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from stacks import (
    BENCH_TIERS,
    Proc,
    Stack,
    cpu_of,
    ensure_database,
    free_port,
    loop_runner,
    pct,
    profile,
    start_stack,
    wait_ready,
)

BENCH = Path(__file__).resolve().parent
LITELLM_SH = BENCH / "peers" / "litellm.sh"
LITELLM_VENV = BENCH.parent / "build" / "peers" / "litellm-venv"
POSTGRES_URL = os.environ.get(
    "PARLEY_BENCH_GATEWAY_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/parley_bench_gateway"
)
REDIS_URL = os.environ.get("PARLEY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
UPSTREAM_MODEL = "fast-upstream"
MODEL = "fast"
TIMEOUT = 60.0
ALL_TARGETS = ("direct", "bare", "asgi", "asgi-httpx", "serve", "split", "litellm")
DEFAULT_TARGETS = ("direct", "bare", "asgi", "serve", "split", "litellm")
BARE_PROXY = BENCH / "bare_proxy.py"


# -- the client ---------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    ttft: float | None = None
    total: float = 0.0
    tokens: int = 0
    error: str | None = None


@dataclass
class Target:
    name: str
    host: str
    port: int
    path: str
    model: str
    key: str
    conns: list[Conn] = field(default_factory=list)
    servers: list[Stack | Proc] = field(default_factory=list)  # stopped with the target

    def request(self, i: int, tokens: int) -> bytes:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": f"Say {tokens} words. ({i})"}],
                "max_tokens": tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.key}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def conn(self, i: int) -> Conn:
        while len(self.conns) <= i:
            self.conns.append(Conn(self.host, self.port))
        return self.conns[i]

    def close(self) -> None:
        for c in self.conns:
            c.close()

    def stop(self) -> None:
        self.close()
        for server in reversed(self.servers):
            server.stop()

    def pids(self) -> dict[str, int]:
        """Each of its server processes by its part (serve; api and worker; litellm)."""
        found: dict[str, int] = {}
        for server in self.servers:
            own = server.pids() if isinstance(server, Stack) else {self.name: server.proc.pid}
            found.update(own)
        return found


class _Answer:
    """One streamed answer as it arrives: SSE lines → TTFT, text, tokens, [DONE]."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.buffer = b""
        self.parts: list[str] = []
        self.chunks = 0
        self.usage: int | None = None
        self.ttft: float | None = None
        self.done = False
        self.error: str | None = None

    def feed(self, data: bytes, now: float) -> None:
        self.buffer += data
        while (i := self.buffer.find(b"\n")) >= 0:
            line = self.buffer[:i].rstrip(b"\r")
            self.buffer = self.buffer[i + 1 :]
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), now)

    def _event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        chunk = json.loads(payload)
        error = chunk.get("error")
        if error:  # an error event mid-stream (parley's /v1 sends one before [DONE])
            detail = error if isinstance(error, dict) else {"message": error}
            self.error = f"error event: {detail.get('code')}: {detail.get('message')}"
        usage = chunk.get("usage")
        if usage and usage.get("completion_tokens") is not None:
            self.usage = int(usage["completion_tokens"])
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                if self.ttft is None:
                    self.ttft = now - self.start
                self.parts.append(content)
                self.chunks += 1


class Conn:
    """One keep-alive HTTP/1.1 connection; requests on it one after another."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reusable = True

    async def ensure(self) -> None:
        """Open (or reopen, if the server closed it while idle) before the clock starts."""
        if self.reader is None or self.reader.at_eof() or self.writer is None:
            self.close()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.reusable = True

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def stream(self, request: bytes, expected: str) -> Result:
        await self.ensure()
        assert self.reader is not None and self.writer is not None
        start = time.perf_counter()
        self.writer.write(request)
        try:
            async with asyncio.timeout(TIMEOUT):
                result = await self._response(self.reader, start, expected)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            result = Result(error=f"{type(e).__name__}: {e}")
        except TimeoutError:
            result = Result(error=f"no answer within {TIMEOUT:.0f} s")
        except ValueError as e:  # a malformed chunk (json) or chunk size
            result = Result(error=f"malformed stream: {e}")
        result.total = time.perf_counter() - start
        if result.error is not None or not self.reusable:
            self.close()
        return result

    async def _response(self, reader: asyncio.StreamReader, start: float, expected: str) -> Result:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        if headers.get("connection") == "close":
            self.reusable = False  # read to the end, then reopen
        if status != 200:
            body = b"".join([piece async for piece in _body(reader, headers)])
            return Result(error=f"HTTP {status}: {body[:200].decode(errors='replace')}")
        answer = _Answer(start)
        async for piece in _body(reader, headers):
            answer.feed(piece, time.perf_counter())
        result = Result(ttft=answer.ttft, tokens=answer.usage or answer.chunks)
        text = "".join(answer.parts)
        if answer.error is not None:
            result.error = answer.error
        elif not answer.done:
            result.error = "the stream ended without [DONE]"
        elif text != expected:
            result.error = f"text relayed differs: {text[:60]!r}"
        return result


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The body's pieces as they arrive: chunked, with a Content-Length, or to the close."""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return
            yield (await reader.readexactly(size + 2))[:-2]
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining:
            piece = await reader.read(min(remaining, 65536))
            if not piece:
                raise asyncio.IncompleteReadError(b"", remaining)
            remaining -= len(piece)
            yield piece
    else:
        while piece := await reader.read(65536):
            yield piece


def expected_text(tokens: int) -> str:
    return "".join(f" w{i}" for i in range(tokens))


async def sequential(target: Target, first: int, n: int, tokens: int) -> list[Result]:
    expected = expected_text(tokens)
    conn = target.conn(0)
    return [await conn.stream(target.request(first + i, tokens), expected) for i in range(n)]


async def concurrent(
    target: Target, first: int, n: int, width: int, tokens: int
) -> tuple[list[Result], float]:
    """``n`` requests, ``width`` in flight (one connection each); results and wall time."""
    expected = expected_text(tokens)
    requests = [target.request(first + i, tokens) for i in range(n)]
    results: list[Result] = []
    conns = [target.conn(w) for w in range(width)]
    await asyncio.gather(*(c.ensure() for c in conns))

    async def work(conn: Conn) -> None:
        while requests:
            results.append(await conn.stream(requests.pop(), expected))

    start = time.perf_counter()
    await asyncio.gather(*(work(c) for c in conns))
    return results, time.perf_counter() - start


# -- the targets --------------------------------------------------------------------------


def parley_config(path: Path, upstream_port: int, slots: int) -> Path:
    path.write_text(
        f"""# bench/gateway.py: parley in front of the fast upstream
default_max_tokens = 32
queue_max = 100000
max_open_streams_per_user = 100000
worker_concurrency = {slots}
{BENCH_TIERS}
[[models]]
name = "{MODEL}"
engine = "openai"
upstream_model = "{UPSTREAM_MODEL}"
replicas = [{{ base_url = "http://127.0.0.1:{upstream_port}/v1", slots = {slots} }}]
"""
    )
    return path


def litellm_config(path: Path, upstream_port: int, key: str) -> Path:
    path.write_text(
        f"""# bench/gateway.py: LiteLLM's proxy in front of the fast upstream
model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{UPSTREAM_MODEL}
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: none
general_settings:
  master_key: {key}
"""
    )
    return path


async def api_key(base: str) -> str:
    """Sign a user up (the bench tier is the default) and make an API key for it."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        email = f"gateway-{uuid.uuid4().hex[:8]}@example.com"
        r = await c.post("/api/auth/signup", json={"email": email, "password": "bench password"})
        r.raise_for_status()
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        r = await c.post("/api/keys", json={"name": "gateway bench"}, headers=auth)
        r.raise_for_status()
        return str(r.json()["key"])


@dataclass
class Running:
    upstream: Proc
    targets: list[Target] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        for t in reversed(self.targets):
            t.stop()
        self.upstream.stop()


def origin(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


async def start_parley(kind: str, config: Path, tmp: Path) -> Target:
    if kind == "split":
        await ensure_database(POSTGRES_URL)
    stack = start_stack(
        kind,
        {},
        tmp,
        args=["--config", str(config)],
        database_url=POSTGRES_URL,
        redis_url=REDIS_URL,
        redis_namespace=f"bench-gateway-{uuid.uuid4().hex[:8]}",
    )
    host, port = origin(stack.base)
    try:
        key = await api_key(stack.base)
    except BaseException:
        stack.stop()
        raise
    return Target(kind, host, port, "/v1/chat/completions", MODEL, key, servers=[stack])


async def start_litellm(upstream_port: int, tmp: Path) -> Target:
    if not (LITELLM_VENV / "bin" / "litellm").exists():
        raise LookupError(f"not installed ({LITELLM_VENV}): run bench/peers/litellm.sh")
    key = f"sk-bench-{uuid.uuid4().hex}"
    config = litellm_config(tmp / "litellm.yaml", upstream_port, key)
    port = free_port()
    proc = Proc(
        ["serve", str(config), str(port)],
        {"LITELLM_LOG": "WARNING"},  # as parley's --log-level WARNING: no access log lines
        tmp / "litellm.log",
        argv=["bash", str(LITELLM_SH)],
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}/health/liveliness", timeout=180, procs=(proc,))
    except BaseException:
        proc.stop()
        raise
    return Target("litellm", "127.0.0.1", port, "/v1/chat/completions", MODEL, key, servers=[proc])


async def start_bare(kind: str, upstream_port: int, tmp: Path) -> Target:
    key = f"sk-bare-{uuid.uuid4().hex}"
    port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    kinds = {"bare": ["raw"], "asgi": ["asgi"], "asgi-httpx": ["asgi", "--httpx-transport"]}
    proc = Proc(
        ["--kind", *kinds[kind], "--port", str(port), "--upstream", upstream, "--key", key],
        {},
        tmp / f"{kind}.log",
        argv=[sys.executable, str(BARE_PROXY)],
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", procs=(proc,))
    except BaseException:
        proc.stop()
        raise
    path = "/v1/chat/completions"
    return Target(kind, "127.0.0.1", port, path, UPSTREAM_MODEL, key, servers=[proc])


async def start_targets(names: list[str], tokens: int, slots: int, tmp: Path) -> Running:
    upstream_port = free_port()
    upstream = Proc(
        ["--port", str(upstream_port), "--tokens", str(tokens), "--model", UPSTREAM_MODEL],
        {},
        tmp / "upstream.log",
        argv=[sys.executable, str(BENCH / "fast_upstream.py")],
    )
    run = Running(upstream)
    try:
        wait_ready(f"http://127.0.0.1:{upstream_port}/v1/models", procs=(upstream,))
        await _start(run, names, upstream_port, tokens, slots, tmp)
    except BaseException:
        run.stop()
        raise
    return run


async def _start(
    run: Running, names: list[str], upstream_port: int, tokens: int, slots: int, tmp: Path
) -> None:
    config = parley_config(tmp / "parley.toml", upstream_port, slots)
    starters: dict[str, Callable[[], Awaitable[Target]]] = {
        "serve": lambda: start_parley("serve", config, tmp),
        "split": lambda: start_parley("split", config, tmp),
        "litellm": lambda: start_litellm(upstream_port, tmp),
        "bare": lambda: start_bare("bare", upstream_port, tmp),
        "asgi": lambda: start_bare("asgi", upstream_port, tmp),
        "asgi-httpx": lambda: start_bare("asgi-httpx", upstream_port, tmp),
    }
    for name in names:
        if name == "direct":
            target = Target(
                "direct", "127.0.0.1", upstream_port, "/v1/chat/completions", UPSTREAM_MODEL, "none"
            )
        else:
            try:
                target = await starters[name]()
            except (LookupError, SystemExit, httpx.HTTPError) as e:
                run.skipped[name] = f"did not start: {e}"
                continue
        probe = (await sequential(target, 0, 1, tokens))[0]
        if probe.error is not None and probe.error.startswith("HTTP 404") and name != "litellm":
            run.skipped[name] = "this parley has no POST /v1/chat/completions (HTTP 404)"
            target.stop()
            continue
        if probe.error is not None:
            run.skipped[name] = f"the first request failed: {probe.error}"
            target.stop()
            continue
        run.targets.append(target)


# -- the run ------------------------------------------------------------------------------


@dataclass
class Figures:
    ttft: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    answers: int = 0  # whole answers at concurrency
    cpu: dict[str, float] = field(default_factory=dict)  # each process's CPU s meanwhile

    def take(self, results: list[Result], *, timed: bool) -> None:
        for r in results:
            if r.error is not None:
                self.errors.append(r.error)
            elif not timed:
                self.tokens += r.tokens
                self.answers += 1
            elif r.ttft is not None:
                self.ttft.append(r.ttft)
                self.total.append(r.total)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


def rotated(targets: list[Target], r: int) -> list[Target]:
    k = r % len(targets)
    return targets[k:] + targets[:k]


def split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


async def measure(
    targets: list[Target], args: argparse.Namespace, upstream_pid: int
) -> dict[str, tuple[Figures, Figures]]:
    one = {t.name: Figures() for t in targets}
    many = {t.name: Figures() for t in targets}
    sent = 1  # request 0 was the probe
    for t in targets:  # warm-up: connections, caches, the first runs' set-up
        await sequential(t, sent, args.warmup, args.tokens)
        await concurrent(t, sent, 2 * args.concurrency, args.concurrency, args.tokens)
    sent += args.warmup + 2 * args.concurrency
    gc.collect()
    gc.freeze()
    for r, n in enumerate(split(args.requests, args.rounds)):
        for t in rotated(targets, r):
            one[t.name].take(await sequential(t, sent, n, args.tokens), timed=True)
        sent += n
    for r, n in enumerate(split(args.load_requests, args.rounds)):
        for t in rotated(targets, r):
            pids = t.pids() or {"upstream": upstream_pid}  # direct: the upstream's own
            before = cpu_of(pids)
            results, seconds = await concurrent(t, sent, n, args.concurrency, args.tokens)
            spent = cpu_of(pids)
            many[t.name].take(results, timed=False)
            many[t.name].seconds += seconds
            cpu = many[t.name].cpu
            for role in pids:
                cpu[role] = cpu.get(role, 0.0) + spent[role] - before[role]
        sent += n
    return {t.name: (one[t.name], many[t.name]) for t in targets}


LABELS = {
    "direct": "direct (the upstream)",
    "bare": "bare proxy (asyncio streams: the floor)",
    "asgi": "bare proxy on uvicorn, Starlette, httpx (aiohttp)",
    "asgi-httpx": "bare proxy on uvicorn, Starlette, httpx (httpcore)",
    "serve": "parley serve (SQLite, in-process bus)",
    "split": "parley api + worker (Postgres, Redis)",
    "litellm": "LiteLLM proxy",
}


def report(
    figures: dict[str, tuple[Figures, Figures]], run: Running, args: argparse.Namespace
) -> None:
    print(
        f"\n## bench/gateway.py: {args.tokens} tokens per answer; concurrency 1: {args.requests}"
        f" requests per target; concurrency {args.concurrency}: {args.load_requests} per target;"
        f" {args.rounds} rounds, targets interleaved\n"
    )
    base1, base32 = figures["direct"]
    d50, d99 = pct(base1.ttft, 50), pct(base1.ttft, 99)
    print(
        f"| target | TTFT p50 ms | TTFT p99 ms | added p50 ms | added p99 ms | answer p50 ms"
        f" | tokens/s at {args.concurrency} | ÷ direct | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (one, many) in figures.items():
        p50, p99 = pct(one.ttft, 50), pct(one.ttft, 99)
        added = "" if name == "direct" else f"{(p50 - d50) * 1e3:+.2f} | {(p99 - d99) * 1e3:+.2f}"
        print(
            f"| {LABELS[name]} | {p50 * 1e3:.2f} | {p99 * 1e3:.2f} | {added or ' | '}"
            f" | {pct(one.total, 50) * 1e3:.2f} | {many.rate:,.0f} | {many.rate / base32.rate:.2f}"
            f" | {len(one.errors) + len(many.errors)} |"
        )
    for name, reason in run.skipped.items():
        print(f"| {LABELS[name]} | not measured: {reason} |")
    for name, (one, many) in figures.items():
        for e in sorted(set(one.errors + many.errors))[:3]:
            print(f"{name}: error: {e}")
    print(f"\nCPU per answer at concurrency {args.concurrency}, by process (from /proc):\n")
    print("| target | answers | CPU ms per answer |")
    print("|---|---|---|")
    for name, (_, many) in figures.items():
        answers = max(1, many.answers)
        each = ", ".join(f"{role} {v / answers * 1e3:.2f}" for role, v in many.cpu.items())
        print(f"| {LABELS[name]} | {many.answers} | {each} |")
    against_floor(figures, args)
    if "serve" in figures:
        one, many = figures["serve"]
        extra = (pct(one.ttft, 50) - d50) * 1e3
        ratio = many.rate / base32.rate
        print(
            f"\nGoals: parley serve adds {extra:.2f} ms to the TTFT p50 (≤ 5 ms:"
            f" {'met' if extra <= 5 else 'not met'}) and relays {ratio:.2f} x direct's tokens/s"
            f" at concurrency {args.concurrency} (≥ 0.5: {'met' if ratio >= 0.5 else 'not met'})."
        )


def per_answer(many: Figures) -> float:
    """CPU ms per answer at concurrency, every process of the target together."""
    return sum(many.cpu.values()) / max(1, many.answers) * 1e3


def against_floor(figures: dict[str, tuple[Figures, Figures]], args: argparse.Namespace) -> None:
    """Each gateway's CPU per answer over the bare proxy's, and issue 48's goals."""
    if "bare" not in figures:
        return
    floor = per_answer(figures["bare"][1])
    direct = figures["direct"][1].rate
    print(f"\nAgainst the bare proxy ({floor:.2f} ms per answer) and issue 48's goals:\n")
    print("| target | CPU ms per answer | ÷ bare | ≤ 1 ms | ÷ direct tokens/s | ≥ 0.3 |")
    print("|---|---|---|---|---|---|")
    for name, (_, many) in figures.items():
        if name == "direct":
            continue
        ms, ratio = per_answer(many), many.rate / direct
        print(
            f"| {LABELS[name]} | {ms:.2f} | {ms / floor:.2f} | {'met' if ms <= 1 else 'not met'}"
            f" | {ratio:.2f} | {'met' if ratio >= 0.3 else 'not met'} |"
        )


async def profiled(target: Target, args: argparse.Namespace) -> None:
    """``--profile``: concurrency-``--concurrency`` load on ``target`` for 8 s, py-spy on each
    of its processes for 6 s of it (build/profiles/gateway-{target}-{process}.svg/.txt)."""
    if not target.pids():
        return
    recorders = profile(target.pids(), 6, f"gateway-{target.name}")
    deadline = time.monotonic() + 8
    sent = 10_000
    while time.monotonic() < deadline:
        await concurrent(target, sent, 4 * args.concurrency, args.concurrency, args.tokens)
        sent += 4 * args.concurrency
    await asyncio.to_thread(lambda: [r.wait() for r in recorders])
    print(f"profiled {target.name}: build/profiles/gateway-{target.name}-*", flush=True)


async def main_async(args: argparse.Namespace) -> None:
    names = [n for n in args.targets.split(",") if n]
    unknown = set(names) - set(ALL_TARGETS)
    if unknown or "direct" not in names:
        raise SystemExit(f"--targets: a list of {', '.join(ALL_TARGETS)}, with direct")
    with tempfile.TemporaryDirectory(prefix="parley-gateway-") as tmp:
        run = await start_targets(names, args.tokens, args.slots, Path(tmp))
        try:
            for name, reason in run.skipped.items():
                print(f"{name}: {reason}", flush=True)
            if not any(t.name == "direct" for t in run.targets):
                raise SystemExit("the upstream itself does not answer")
            if args.profile:
                for t in run.targets:
                    await profiled(t, args)
                return
            started = time.monotonic()
            figures = await measure(run.targets, args, run.upstream.proc.pid)
            report(figures, run, args)
            print(f"\nmeasured in {time.monotonic() - started:.0f} s")
        finally:
            run.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200, help="at concurrency 1, per target")
    parser.add_argument("--warmup", type=int, default=20, help="sequential, per target")
    parser.add_argument("--load-requests", type=int, default=1024, help="at --concurrency")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="per answer")
    parser.add_argument("--slots", type=int, default=64, help="parley's replica slots")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of measuring: each target under load, py-spy on its processes",
    )
    args = parser.parse_args()
    runner = loop_runner()
    with contextlib.suppress(KeyboardInterrupt):
        runner(main_async(args))


if __name__ == "__main__":
    main()
