"""Quality of service under overload (issue 12): parley's admission beside a FIFO baseline.

    python bench/overload.py [--duration 20] [--slots 96] [--itl-ms 90] [--load 2]
                             [--pro-share 0.2] [--reserved-slots 3] [--free-max-load 1.1]
                             [--modes baseline,admission] [--seed 12] [--json PATH]

One run starts ``parley serve`` (SQLite, in-process bus, the fake engine with ``--slots``
slots) once per mode, each fresh, and plays the same seeded schedule against each:

* ``baseline``: first in, first out, no shedding: both tiers at priority 0, no ``max_load``,
  per-user limits and token budgets out of reach, a queue that never fills;
* ``admission``: parley's admission as an operator would set it: free at priority 0 with
  ``max_load`` = ``--free-max-load`` and one run at a time per user, pro at priority 2 with
  no ``max_load`` (refused only when the queue is full) and 8 runs per user, and the
  worker's ``reserved_slots`` = ``--reserved-slots`` kept for pro. Budgets stay
  out of reach in both modes: they are a different mechanism (a user's quota, not the
  model's load). The whole difference is ``modes()`` below; a field the parley under test
  does not know yet (``max_load`` before it lands) is left out and the mode's label says so.

Users: ``--free-users`` + ``--pro-users`` sign up (the default tier is free) and make an API
key each; the pro users are then moved to pro with the store call ``parley user set-tier``
makes (``parley.store.users.set_tier``), batched in one transaction rather than one CLI
process per user.

Requests: ``POST /v1/chat/completions`` with ``stream: true``, one request per run over
keep-alive connections (httpx): the admission decision comes back as the response's status
(a refusal before any byte of a stream), TTFT is the time from handing the request to the
client to the first chunk with content (the same thing a program's user waits for), and the
run's id comes back in ``x-parley-run-id``. The chat API would cost three requests a run
(chat, message, stream) and grow each chat's history. The client parses JSON only up to the
first content chunk (and any chunk naming an error), so its CPU stays small.

Schedule: a phase at low load first (``--unloaded`` requests per tier, one every
``UNLOADED_GAP`` s, about a sixth of the slots busy: every run starts at once) for the
unloaded TTFT per tier, then ``--duration`` s of open-loop Poisson arrivals at ``--load`` x
capacity (capacity = slots ÷ the mean run's engine time: TTFT + (mean tokens - 1) x ITL;
each run asks for a seeded 16-32 tokens), ``--pro-share`` of them from a random pro user,
the rest from a random free user. Every request is then awaited to its end: the baseline's
backlog (offered - capacity, times the duration) drains for about another duration.

Measured per mode and tier: offered; served share (``[DONE]`` after content, no error
event); refusals by status and code; failures (an error event, a transport error); TTFT
p50/p99 and each as x the same mode's unloaded figure; refusal latency p99 (request handed
to the client → the refusal's body read); the longest queue wait, from the run's own
timestamps (``started_at - created_at`` of ``GET /api/runs/{id}``, read after the load). Per
mode: the engine's busy fraction, from ``/metrics`` scraped every ``SCRAPE_INTERVAL`` s
while arrivals last (``parley_engine_batch_size``: the fake engine's slots in use, read at the
scrape, averaged, ÷ slots; the first ``RAMP_SECONDS`` left out: the engine filling from
idle), beside the same from the runs' timestamps (Σ running time inside that window ÷ slots x
window: worker slots held, which includes the few ms a run spends claimed but not yet in, or
already out of, the engine); runs served per second in the window; and CPU over the window
(parley's process, this client, the whole machine) so a saturated machine shows; and a
``GET /v1/models`` every ``PROBE_INTERVAL`` s, what any answer cost meanwhile, beside which
the refusals' latency is read.

Goals (issue 12), judged per mode: pro served ≥ 99.9 % with TTFT p99 ≤ 2 x unloaded; free
refused in < 20 ms p99; engine busy ≥ 95 %.

Why these defaults: 96 slots, 90 ms a token (a run of ~2.1 s), ``--reserved-slots`` 3,
``--free-max-load`` 1.1. Pro's TTFT needs a slot free the moment a pro run arrives; a busy
engine needs every freed slot refilled at once, which means free runs waiting in the queue.
Shedding alone cannot give both (a shed run waits nowhere, so a slot freed under the
threshold idles until the next free arrival; at 16 slots and no reserve: ``max_load`` 0.85
left the engine ~80 % busy with pro's TTFT p99 ~1.8-2.7x unloaded, 1.0 ~93-95 % and
~4-4.5x). So admission keeps free runs queued (``max_load`` above 1) and the worker keeps
``reserved_slots`` for the top tier at dispatch: a free run starts only while more than that
many slots are free, so an arriving pro run finds one. The reserve idles at most its share
of the slots (3 of 96: ~3 %); a pro run still waits when more pro runs arrive within one
slot's turnover (a run's time ÷ slots: ~22 ms here) than the reserve holds. Both goals
need a reserve deep enough for pro's bursts and small beside the slots: at 32 slots
(740 ms runs) reserve 2 gave busy ~92 % and pro p99 2.0-2.75x, reserve 4 busy 85 % and
1.15x; at 64 slots reserve 3 busy 94.6 % and 1.93x; at 96 both goals are met (bench/README.md).
Real engines batch more sequences than that (vLLM's default is 256).

Machine: everything (parley, this client) shares the 2 cores. The defaults (96 slots, TTFT
50 ms, 90 ms between tokens: ~1,050 tokens/s, ~42 runs/s served, ~87 offered) kept parley's
process at ~40 % of a core and this client at ~23 % here; the report's CPU columns show
it for each run, and it warns when the machine itself was busy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from stacks import Stack, loop_runner, pct, start_stack

MODEL = "parley-fake"
RUN_ID_HEADER = "x-parley-run-id"
PASSWORD = "overload bench: correct horse battery"  # noqa: S105 - a throwaway account
UNLOADED_GAP = 0.15  # s between unloaded requests
SCRAPE_INTERVAL = 0.25
PROBE_INTERVAL = 0.1
RAMP_SECONDS = 1.0
REQUEST_TIMEOUT = 180.0
TIERS = ("free", "pro")

# Out of reach in both modes: token budgets are a user's quota, not the model's load.
_ROOMY = {
    "tokens_per_minute": 1_000_000_000,
    "burst_tokens": 1_000_000_000,
    "max_output_tokens": 512,
    "max_queue_wait_seconds": 600,
}
FREE_MAX_LOAD = 1.1
RESERVED_SLOTS = 3


def modes(free_max_load: float) -> dict[str, dict[str, dict[str, Any]]]:
    """Each mode's tiers: the one thing that differs between the two parley processes."""
    return {
        "baseline": {
            "free": {**_ROOMY, "priority": 0, "max_concurrent_runs": 100_000},
            "pro": {**_ROOMY, "priority": 0, "max_concurrent_runs": 100_000},
        },
        "admission": {
            "free": {
                **_ROOMY,
                "priority": 0,
                "max_concurrent_runs": 1,
                "max_load": free_max_load,
            },
            "pro": {**_ROOMY, "priority": 2, "max_concurrent_runs": 8, "max_load": None},
        },
    }


# -- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    slots: int
    ttft_ms: float
    itl_ms: float
    min_tokens: int
    max_tokens: int
    load: float
    pro_share: float
    duration: float
    free_users: int
    pro_users: int
    unloaded: int
    warmup: int
    seed: int

    @property
    def mean_run(self) -> float:
        """A run's mean time in the engine, in seconds."""
        mean_tokens = (self.min_tokens + self.max_tokens) / 2
        return (self.ttft_ms + (mean_tokens - 1) * self.itl_ms) / 1000

    @property
    def capacity(self) -> float:
        """Runs per second the engine can serve."""
        return self.slots / self.mean_run

    @property
    def rate(self) -> float:
        return self.load * self.capacity


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # s after the phase's start
    tier: str
    user: int
    tokens: int


def users_of(w: Workload, tier: str) -> int:
    return w.pro_users if tier == "pro" else w.free_users


def loaded_schedule(w: Workload) -> list[Arrival]:
    rng = random.Random(w.seed)
    out: list[Arrival] = []
    t = rng.expovariate(w.rate)
    while t < w.duration:
        tier = "pro" if rng.random() < w.pro_share else "free"
        user = rng.randrange(users_of(w, tier))
        out.append(Arrival(t, tier, user, rng.randint(w.min_tokens, w.max_tokens)))
        t += rng.expovariate(w.rate)
    return out


def unloaded_schedule(w: Workload, n: int, first: float = 0.0) -> list[Arrival]:
    rng = random.Random(w.seed + 1)
    return [
        Arrival(
            first + i * UNLOADED_GAP,
            TIERS[i % 2],
            rng.randrange(users_of(w, TIERS[i % 2])),
            rng.randint(w.min_tokens, w.max_tokens),
        )
        for i in range(n)
    ]


# -- parley -------------------------------------------------------------------------------


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))


def supported(tiers: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The tiers without None values and without fields this parley's TierSettings lacks
    (they would fail its validation), and the names of the fields left out."""
    from parley.tiers import TierSettings

    known = set(TierSettings.model_fields)
    dropped = sorted({k for t in tiers.values() for k in t if k not in known})
    kept = {
        name: {k: v for k, v in t.items() if k in known and v is not None}
        for name, t in tiers.items()
    }
    return kept, dropped


def parley_config(
    path: Path, w: Workload, tiers: dict[str, dict[str, Any]], reserved_slots: int
) -> Path:
    lines = [
        "# bench/overload.py",
        f"reserved_slots = {reserved_slots}",
        'default_tier = "free"',
        f"default_max_tokens = {w.max_tokens}",
        "queue_max = 100000",
        "max_open_streams_per_user = 100000",
        "signup_free_attempts_per_address = 100000",
        'engine = "fake"',
        "[fake_engine]",
        f"time_to_first_token_ms = {w.ttft_ms}",
        f"inter_token_latency_ms = {w.itl_ms}",
        f"output_tokens = {w.max_tokens}",
        f"slots = {w.slots}",
    ]
    for name, settings in tiers.items():
        lines.append(f"[tiers.{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Users:
    keys: dict[str, list[str]]  # tier → API keys


async def sign_up(client: httpx.AsyncClient, w: Workload, tag: str, database_url: str) -> Users:
    gate = asyncio.Semaphore(8)

    async def one(tier: str, i: int) -> tuple[str, str]:
        email = f"overload-{tag}-{tier}-{i}@example.com"
        async with gate:
            r = await client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
            r.raise_for_status()
            auth = {"Authorization": f"Bearer {r.json()['token']}"}
            r = await client.post("/api/keys", json={"name": "overload"}, headers=auth)
            r.raise_for_status()
            return email, str(r.json()["key"])

    made = {
        tier: await asyncio.gather(*(one(tier, i) for i in range(users_of(w, tier))))
        for tier in TIERS
    }
    await set_tier([email for email, _ in made["pro"]], "pro", database_url)
    return Users({tier: [key for _, key in made[tier]] for tier in TIERS})


async def set_tier(emails: list[str], tier: str, database_url: str) -> None:
    """What ``parley user set-tier EMAIL TIER`` does, for many users in one transaction."""
    from parley.store import users
    from parley.store.database import Database

    db = Database(database_url)
    try:
        async with db.transaction() as s:
            for email in emails:
                user = await users.find_user_by_email(s, email)
                if user is None:
                    raise SystemExit(f"no user {email} to move to {tier}")
                await users.set_tier(s, user, tier)
    finally:
        await db.dispose()


# -- the client ---------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    tier: str
    scheduled: float  # perf_counter of the arrival
    sent: float = 0.0
    status: int = 0
    code: str | None = None  # a refusal's or an error event's code
    refusal: float | None = None  # s to the refusal
    retry_after: float | None = None  # the refusal's Retry-After, s
    ttft: float | None = None
    done: bool = False
    error: str | None = None
    run_id: str | None = None
    key: str = ""
    created: float | None = None  # the run's timestamps (epoch s), read afterwards
    started: float | None = None
    finished: float | None = None

    @property
    def served(self) -> bool:
        return self.status == 200 and self.done and self.error is None and self.ttft is not None

    @property
    def refused(self) -> bool:
        return self.status not in (0, 200)

    @property
    def queue_wait(self) -> float | None:
        if self.created is None or self.started is None:
            return None
        return max(0.0, self.started - self.created)


def _code(raw: bytes) -> str | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code")) if isinstance(error, dict) else None


async def send(client: httpx.AsyncClient, key: str, tokens: int, text: str, out: Outcome) -> None:
    out.key = key
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    out.sent = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            out.status = r.status_code
            if r.status_code != 200:
                raw = await r.aread()
                out.refusal = time.perf_counter() - out.sent
                out.code = _code(raw)
                with contextlib.suppress(TypeError, ValueError):
                    out.retry_after = float(r.headers.get("retry-after"))
                return
            out.run_id = r.headers.get(RUN_ID_HEADER)
            await _read_stream(r, out)
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e}"


async def _read_stream(r: httpx.Response, out: Outcome) -> None:
    async for line in r.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            out.done = True
            return
        if out.ttft is not None and '"error"' not in data:
            continue  # after the first token only errors matter: no JSON parsed
        chunk = json.loads(data)
        error = chunk.get("error")
        if error:
            out.code = str(error.get("code")) if isinstance(error, dict) else str(error)
            out.error = f"error event: {out.code}"
        for choice in chunk.get("choices") or ():
            if (choice.get("delta") or {}).get("content") and out.ttft is None:
                out.ttft = time.perf_counter() - out.sent


async def play(
    client: httpx.AsyncClient, users: Users, arrivals: list[Arrival], label: str
) -> tuple[list[Outcome], float]:
    """Every arrival sent at its time (open loop) and awaited; the outcomes and the
    perf_counter time the schedule's zero was."""
    start = time.perf_counter() + 0.05
    outcomes: list[Outcome] = []
    tasks: list[asyncio.Task[None]] = []
    for i, a in enumerate(arrivals):
        delay = start + a.at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        out = Outcome(a.tier, start + a.at)
        outcomes.append(out)
        key = users.keys[a.tier][a.user]
        text = f"{label} {i}: tell me about load shedding"
        tasks.append(asyncio.create_task(send(client, key, a.tokens, text, out)))
    await asyncio.gather(*tasks)
    return outcomes, start


async def read_runs(client: httpx.AsyncClient, outcomes: list[Outcome]) -> None:
    """Each run's created/started/finished, from the run itself."""
    gate = asyncio.Semaphore(8)

    async def one(out: Outcome) -> None:
        async with gate:
            r = await client.get(
                f"/api/runs/{out.run_id}", headers={"Authorization": f"Bearer {out.key}"}
            )
        if r.status_code != 200:
            return
        run = r.json()
        out.created = _epoch(run.get("created_at"))
        out.started = _epoch(run.get("started_at"))
        out.finished = _epoch(run.get("finished_at"))

    await asyncio.gather(*(one(o) for o in outcomes if o.run_id))


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


# -- the engine's load and the CPU --------------------------------------------------------


def _gauge(text: str, name: str) -> float:
    """The sum of a metric's samples in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in "{ ":
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Samples:
    at: list[float] = field(default_factory=list)  # perf_counter
    busy: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)
    probe: list[float] = field(default_factory=list)  # s, GET /v1/models


async def probe(base: str, key: str, until: float, samples: Samples) -> None:
    """A trivial authenticated request every ``PROBE_INTERVAL`` s: what any answer costs
    under this load, beside which the refusals' latency is read."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=headers) as c:
        while time.perf_counter() < until:
            with contextlib.suppress(httpx.HTTPError):
                sent = time.perf_counter()
                if (await c.get("/v1/models")).status_code == 200:
                    samples.probe.append(time.perf_counter() - sent)
            await asyncio.sleep(PROBE_INTERVAL)


async def scrape(base: str, until: float, samples: Samples) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:
        while time.perf_counter() < until:
            with contextlib.suppress(httpx.HTTPError):
                text = (await c.get("/metrics")).text
                samples.at.append(time.perf_counter())
                samples.busy.append(_gauge(text, "parley_engine_batch_size"))
                samples.queued.append(_gauge(text, "parley_queue_depth"))
            await asyncio.sleep(SCRAPE_INTERVAL)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass
class Cpu:
    parley: float = 0.0  # cores used (1.0 = one core, all the time)
    client: float = 0.0
    machine: float = 0.0  # share of all cores busy
    cores: int = os.cpu_count() or 1


class CpuMeter:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.wall = time.perf_counter()
        self.parley = process_cpu(pid)
        self.client = time.process_time()
        self.machine = machine_cpu()

    def read(self) -> Cpu:
        wall = time.perf_counter() - self.wall
        busy, total = machine_cpu()
        return Cpu(
            parley=(process_cpu(self.pid) - self.parley) / wall,
            client=(time.process_time() - self.client) / wall,
            machine=(busy - self.machine[0]) / max(1, total - self.machine[1]),
        )


# -- one mode -----------------------------------------------------------------------------


@dataclass
class ModeRun:
    name: str
    label: str
    unloaded: list[Outcome]
    loaded: list[Outcome]
    start: float  # perf_counter of the loaded schedule's zero
    wall_start: float  # the same instant, epoch seconds
    samples: Samples
    cpu: Cpu
    seconds: float  # from the first loaded arrival to the last answer


async def run_mode(
    name: str,
    tiers: dict[str, dict[str, Any]],
    w: Workload,
    arrivals: list[Arrival],
    tmp: Path,
    reserved_slots: int = 0,
) -> ModeRun:
    kept, dropped = supported(tiers)
    label = name if not dropped else f"{name} (without {', '.join(dropped)}: not in this parley)"
    config = parley_config(tmp / f"{name}.toml", w, kept, reserved_slots)
    stack = start_stack("serve", {}, tmp, args=["--config", str(config)])
    try:
        return await _measure(stack, name, label, w, arrivals)
    finally:
        stack.stop()


async def _measure(
    stack: Stack, name: str, label: str, w: Workload, arrivals: list[Arrival]
) -> ModeRun:
    database = serve_database(stack)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=2000)
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10)
    async with httpx.AsyncClient(base_url=stack.base, limits=limits, timeout=timeout) as client:
        users = await sign_up(client, w, name, f"sqlite+aiosqlite:///{database.resolve()}")
        print(f"{label}: {w.free_users} free + {w.pro_users} pro users ready", flush=True)
        await play(client, users, unloaded_schedule(w, w.warmup), f"{name} warm-up")
        unloaded, _ = await play(
            client, users, unloaded_schedule(w, 2 * w.unloaded), f"{name} unloaded"
        )
        gc.collect()
        gc.freeze()  # the collector need not walk what set-up made while the load runs
        samples = Samples()
        meter = CpuMeter(stack.procs[0].proc.pid)
        perf0, wall0 = time.perf_counter(), time.time()
        until = perf0 + w.duration + 0.05
        cpu: list[Cpu] = []

        async def window() -> None:
            await asyncio.gather(
                scrape(stack.base, until, samples),
                probe(stack.base, users.keys["pro"][0], until, samples),
            )
            cpu.append(meter.read())

        sampler = asyncio.create_task(window())
        loaded, start = await play(client, users, arrivals, f"{name} loaded")
        seconds = time.perf_counter() - start
        await sampler
        await read_runs(client, loaded)
        if not stack.procs[0].alive():
            raise SystemExit(f"parley exited during {name}:\n{stack.procs[0].tail()}")
    wall_start = wall0 + (start - perf0)
    return ModeRun(name, label, unloaded, loaded, start, wall_start, samples, cpu[0], seconds)


def serve_database(stack: Stack) -> Path:
    """The SQLite file of a ``serve`` stack: ``start_stack`` gives it the data directory
    ``serve-PORT`` beside its log ``serve-PORT.log``."""
    port = stack.base.rsplit(":", 1)[1]
    data = stack.procs[0].log.with_suffix("")
    if data.name != f"serve-{port}":
        raise SystemExit(f"bench/stacks.py no longer names serve's data directory serve-{port}")
    return data / "parley.db"


# -- figures ------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return seconds * 1000


@dataclass
class TierFigures:
    offered: int
    served: float
    refused: dict[str, int]
    failed: dict[str, int]
    ttft_p50_ms: float
    ttft_p99_ms: float
    unloaded_p50_ms: float
    unloaded_p99_ms: float
    refusal_p50_ms: float
    refusal_p99_ms: float
    refusal_max_ms: float
    retry_after_given: float  # share of the refusals with a Retry-After
    retry_after_p50_s: float
    queue_wait_max_s: float
    queue_wait_p99_s: float

    @property
    def p50_ratio(self) -> float:
        return self.ttft_p50_ms / self.unloaded_p50_ms

    @property
    def p99_ratio(self) -> float:
        return self.ttft_p99_ms / self.unloaded_p99_ms


@dataclass
class ModeFigures:
    label: str
    tiers: dict[str, TierFigures]
    busy_engine: float
    busy_runs: float
    served_per_second: float
    offered_per_second: float
    cpu: Cpu
    client_lag_p99_ms: float
    probe_p50_ms: float
    probe_p99_ms: float
    queue_depth_max: float
    seconds: float
    unloaded_failures: int


def tier_figures(run: ModeRun, tier: str) -> TierFigures:
    mine = [o for o in run.loaded if o.tier == tier]
    calm = [o for o in run.unloaded if o.tier == tier and o.served]
    served = [o for o in mine if o.served]
    refused = [o for o in mine if o.refused]
    failed = [o for o in mine if not o.served and not o.refused]
    waits = [q for o in served if (q := o.queue_wait) is not None]
    refusal = [ms(o.refusal) for o in refused if o.refusal is not None]
    retry = [o.retry_after for o in refused if o.retry_after is not None]
    return TierFigures(
        offered=len(mine),
        served=len(served) / len(mine) if mine else math.nan,
        refused=dict(Counter(f"{o.status} {o.code}" for o in refused)),
        failed=dict(Counter(o.code or o.error or "no [DONE]" for o in failed)),
        ttft_p50_ms=ms(pct([o.ttft for o in served if o.ttft], 50)),
        ttft_p99_ms=ms(pct([o.ttft for o in served if o.ttft], 99)),
        unloaded_p50_ms=ms(pct([o.ttft for o in calm if o.ttft], 50)),
        unloaded_p99_ms=ms(pct([o.ttft for o in calm if o.ttft], 99)),
        refusal_p50_ms=pct(refusal, 50),
        refusal_p99_ms=pct(refusal, 99),
        refusal_max_ms=max(refusal, default=math.nan),
        retry_after_given=len(retry) / len(refused) if refused else math.nan,
        retry_after_p50_s=pct(retry, 50),
        queue_wait_max_s=max(waits, default=math.nan),
        queue_wait_p99_s=pct(waits, 99),
    )


def mode_figures(run: ModeRun, w: Workload) -> ModeFigures:
    lo, hi = run.start + RAMP_SECONDS, run.start + w.duration
    busy = [b for t, b in zip(run.samples.at, run.samples.busy, strict=True) if lo <= t <= hi]
    wall_lo, wall_hi = run.wall_start + RAMP_SECONDS, run.wall_start + w.duration
    held = 0.0
    ended = 0
    for o in run.loaded:
        if o.started is not None and o.finished is not None:
            held += max(0.0, min(o.finished, wall_hi) - max(o.started, wall_lo))
            ended += o.served and wall_lo <= o.finished <= wall_hi
    window = wall_hi - wall_lo
    lag = [ms(o.sent - o.scheduled) for o in run.loaded]
    return ModeFigures(
        label=run.label,
        tiers={tier: tier_figures(run, tier) for tier in TIERS},
        busy_engine=sum(busy) / len(busy) / w.slots if busy else math.nan,
        busy_runs=held / (w.slots * window),
        served_per_second=ended / window,
        offered_per_second=len(run.loaded) / w.duration,
        cpu=run.cpu,
        client_lag_p99_ms=pct(lag, 99),
        probe_p50_ms=ms(pct(run.samples.probe, 50)),
        probe_p99_ms=ms(pct(run.samples.probe, 99)),
        queue_depth_max=max(run.samples.queued, default=math.nan),
        seconds=run.seconds,
        unloaded_failures=sum(not o.served for o in run.unloaded),
    )


@dataclass
class Goal:
    name: str
    value: str
    met: bool | None  # None: not measured


def goals(f: ModeFigures) -> list[Goal]:
    pro, free = f.tiers["pro"], f.tiers["free"]
    refusal = free.refusal_p99_ms
    return [
        Goal("pro served ≥ 99.9 %", f"{pro.served:.2%}", pro.served >= 0.999),
        Goal(
            "pro TTFT p99 ≤ 2 x unloaded",
            f"{pro.ttft_p99_ms:.0f} ms = {pro.p99_ratio:.2f} x",
            pro.p99_ratio <= 2 if not math.isnan(pro.p99_ratio) else None,
        ),
        Goal(
            "free refused in < 20 ms p99",
            "no refusals" if math.isnan(refusal) else f"{refusal:.1f} ms",
            None if math.isnan(refusal) else refusal < 20,
        ),
        Goal("engine busy ≥ 95 %", f"{f.busy_engine:.1%}", f.busy_engine >= 0.95),
    ]


# -- the report ---------------------------------------------------------------------------


def _codes(counts: dict[str, int], offered: int) -> str:
    if not counts:
        return "—"
    return ", ".join(f"{code} {n / offered:.1%}" for code, n in sorted(counts.items()))


def _n(value: float, digits: int = 0, suffix: str = "") -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}{suffix}"


def report(figures: dict[str, ModeFigures], w: Workload) -> None:
    print(
        f"\n## bench/overload.py: fake engine, {w.slots} slots, TTFT {w.ttft_ms:g} ms,"
        f" {w.itl_ms:g} ms a token, {w.min_tokens}-{w.max_tokens} tokens a run (mean"
        f" {w.mean_run * 1000:.0f} ms: capacity {w.capacity:.1f} runs/s); offered"
        f" {w.load:g} x capacity for {w.duration:g} s, {1 - w.pro_share:.0%} free /"
        f" {w.pro_share:.0%} pro ({w.free_users} / {w.pro_users} users); seed {w.seed}\n"
    )
    print(
        "| mode | tier | offered | served | refused | failed | TTFT p50 ms (x unl.)"
        " | TTFT p99 ms (x unl.) | unloaded p50 / p99 ms | refusal p99 ms | queue wait max s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        for tier, t in f.tiers.items():
            print(
                f"| {name} | {tier} | {t.offered} | {t.served:.1%}"
                f" | {_codes(t.refused, t.offered)} | {_codes(t.failed, t.offered)}"
                f" | {_n(t.ttft_p50_ms)} ({_n(t.p50_ratio, 2)}) |"
                f" {_n(t.ttft_p99_ms)} ({_n(t.p99_ratio, 2)})"
                f" | {_n(t.unloaded_p50_ms)} / {_n(t.unloaded_p99_ms)}"
                f" | {_n(t.refusal_p99_ms, 1)} | {_n(t.queue_wait_max_s, 2)} |"
            )
    print(
        "\n| mode | engine busy (/metrics) | worker slots held (runs) | served runs/s"
        " | offered runs/s | deepest queue | CPU parley | CPU client | CPU machine"
        " | client lag p99 ms | GET /v1/models p50 / p99 ms | until the last answer s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        c = f.cpu
        print(
            f"| {name} | {f.busy_engine:.1%} | {f.busy_runs:.1%} | {f.served_per_second:.1f}"
            f" | {f.offered_per_second:.1f} | {_n(f.queue_depth_max)} | {c.parley:.0%} of a core"
            f" | {c.client:.0%} of a core | {c.machine:.0%} of {c.cores} cores"
            f" | {f.client_lag_p99_ms:.1f} | {f.probe_p50_ms:.1f} / {f.probe_p99_ms:.1f}"
            f" | {f.seconds:.1f} |"
        )
    for name, f in figures.items():
        if f.label != name:
            print(f"\n{name}: ran as {f.label}")
        for tier, t in f.tiers.items():
            if t.refused:
                print(
                    f"\n{name}, {tier}: Retry-After on {t.retry_after_given:.0%} of the refusals,"
                    f" p50 {_n(t.retry_after_p50_s, 1)} s; refusal p50 {t.refusal_p50_ms:.1f} ms,"
                    f" slowest {t.refusal_max_ms:.1f} ms"
                )
        if f.cpu.machine > 0.85 or f.client_lag_p99_ms > 20:
            print(
                f"\n{name}: WARNING: the machine was busy ({f.cpu.machine:.0%} of its cores,"
                f" this client late by {f.client_lag_p99_ms:.0f} ms p99): latencies are inflated"
                " by CPU others took, not only by the load measured; run again"
            )
        if f.unloaded_failures:
            print(f"\n{name}: {f.unloaded_failures} unloaded requests not served")
    names = list(figures)
    print("\n| goal | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    rows = {n: goals(f) for n, f in figures.items()}
    for i, g in enumerate(rows[names[0]]):
        cells = []
        for n in names:
            one = rows[n][i]
            verdict = {True: "met", False: "not met", None: "not measured"}[one.met]
            cells.append(f"{one.value}: {verdict}")
        print(f"| {g.name} | " + " | ".join(cells) + " |")


def to_json(figures: dict[str, ModeFigures], w: Workload) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": asdict(w), "modes": {}}
    out["workload"].update(mean_run_s=w.mean_run, capacity=w.capacity, rate=w.rate)
    for name, f in figures.items():
        mode = asdict(f)
        for tier, t in f.tiers.items():
            mode["tiers"][tier].update(p50_ratio=t.p50_ratio, p99_ratio=t.p99_ratio)
        mode["goals"] = [asdict(g) for g in goals(f)]
        out["modes"][name] = mode
    finite: dict[str, Any] = _finite(out)
    return finite


def _finite(value: Any) -> Any:
    """NaN as null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# -- main ---------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    low, _, high = args.tokens.partition("-")
    w = Workload(
        slots=args.slots,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        min_tokens=int(low),
        max_tokens=int(high or low),
        load=args.load,
        pro_share=args.pro_share,
        duration=args.duration,
        free_users=args.free_users,
        pro_users=args.pro_users,
        unloaded=args.unloaded,
        warmup=args.warmup,
        seed=args.seed,
    )
    every = modes(args.free_max_load)
    names = [n for n in args.modes.split(",") if n]
    if not names or set(names) - set(every):
        raise SystemExit(f"--modes: a list of {', '.join(every)}")
    arrivals = loaded_schedule(w)
    began = time.monotonic()
    figures: dict[str, ModeFigures] = {}
    with tempfile.TemporaryDirectory(prefix="parley-overload-") as tmp:
        for name in names:
            reserved = args.reserved_slots if name == "admission" else 0
            run = await run_mode(name, every[name], w, arrivals, Path(tmp), reserved)
            figures[name] = mode_figures(run, w)
    if args.json != "-":
        report(figures, w)
        print(f"\nmeasured in {time.monotonic() - began:.0f} s")
    return to_json(figures, w)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=20, help="s of loaded arrivals")
    parser.add_argument("--slots", type=int, default=96, help="the fake engine's")
    parser.add_argument("--ttft-ms", type=float, default=50)
    parser.add_argument("--itl-ms", type=float, default=90)
    parser.add_argument("--tokens", default="16-32", help="a run's length: N or LOW-HIGH")
    parser.add_argument("--load", type=float, default=2.0, help="offered ÷ capacity")
    parser.add_argument("--pro-share", type=float, default=0.2, help="of the arrivals")
    parser.add_argument("--free-users", type=int, default=200)
    parser.add_argument("--pro-users", type=int, default=20)
    parser.add_argument("--unloaded", type=int, default=20, help="requests per tier")
    parser.add_argument("--warmup", type=int, default=10, help="unrecorded, before those")
    parser.add_argument("--free-max-load", type=float, default=FREE_MAX_LOAD)
    parser.add_argument(
        "--reserved-slots", type=int, default=RESERVED_SLOTS, help="kept for pro (admission)"
    )
    parser.add_argument("--modes", default="baseline,admission")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--json", default="", help="write the figures to PATH (-: stdout only)")
    args = parser.parse_args()
    runner = loop_runner()
    with contextlib.suppress(KeyboardInterrupt):
        figures = runner(main_async(args))
        if args.json:
            text = json.dumps(figures, indent=2, ensure_ascii=False)
            if args.json == "-":
                print(text)
            else:
                Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
