"""The capacity planner's queueing model against the split stack (issue 20).

    .venv/bin/python bench/capacity.py [--slots 8] [--ttft-ms 50] [--itl-ms 62] [--tokens 16]
        [--loads 0.5,0.8,0.95] [--duration 60] [--ramp 5] [--seed 20] [--json PATH]

One run starts the split stack (``parley api`` + ``parley worker`` on Postgres, database
``parley_bench_capacity``, and Redis) with the fake engine at a known capacity: ``--slots``
slots, each run ``TTFT + (tokens - 1) x ITL`` in the engine (~1 s by default). Per-user
limits, budgets and shedding are out of reach (one tier, as bench/overload.py's baseline).

1. Calibration, every figure measured (the settings only pick the rates):
   * low load (Poisson arrivals at a quarter of the engine's pace for ``--calibrate`` s:
     about 2 of the slots busy, nobody waits for one): parley's dispatch time W0,
     ``started_at - created_at`` with a slot free (enqueue, the worker's dequeue, the claim),
     under arrivals as bursty as the loads'; and the run's own time ``finished_at -
     started_at`` (mean, and its squared coefficient of variation Cs²: in the closed loop
     below, with more streams open, it runs ~1 % longer than under any of the loads);
   * a closed loop of ``slots + --queued`` clients for ``--saturate`` s (every slot busy,
     ``--queued`` runs always waiting, as when runs queue under load): the handoff, a queued
     run's ``started_at`` - the last ``finished_at`` before it (the worker's release of the
     slot, its dequeue and claim). The service time the queue sees is a slot's turn,
     S = run time + handoff; capacity = slots ÷ S.
2. Open-loop Poisson arrivals at each of ``--loads`` x capacity for ``--duration`` s, every
   request a ``POST /v1/chat/completions`` stream read to ``[DONE]``. Measured over the
   steady window (``--ramp`` s to the last arrival): the time-averaged concurrency L (runs
   queued or running: Σ of each run's ``[created_at, finished_at]`` inside the window ÷ the
   window) and the mean queue wait Wq (``started_at - created_at`` of the runs created in
   it), from the runs' own timestamps (``GET /api/runs/{id}``).
3. Predicted with the planner's code (``parley.capacity.queueing``) from the calibration:
   * long-run, for the rate the seeded schedule offered in the window: Wq = W0 + the mean
     wait of ``slots`` servers of service S (Erlang C x Allen-Cunneen (Ca² + Cs²)/2, Ca² = 1:
     Poisson), beside the same queue's discrete-event simulation; L = λ (Wq + run time)
     (Little's law); and where one window's mean wait falls (10th-90th percentile over 200
     simulated windows as long as the bench's): a window of a minute holds few bursts, and
     the mean wait at 50 % load is made by one or two of them;
   * replayed: the same model (FCFS, ``slots`` servers, S, W0) run on the window's own
     arrivals (the runs' ``created_at``): what the model says for the very arrivals
     measured, without the window's sampling luck.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import gc
import json
import math
import random
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from stacks import BENCH_TIERS, POSTGRES_URL, Stack, cpu, loop_runner, start_stack

from parley.capacity.queueing import Queue, fcfs_starts, simulate, squared_cv

MODEL = "parley-fake"
RUN_ID_HEADER = "x-parley-run-id"
PASSWORD = "capacity bench: correct horse battery"  # noqa: S105 - a throwaway account
DATABASE_URL = POSTGRES_URL.rsplit("/", 1)[0] + "/parley_bench_capacity"
USERS = 16
REQUEST_TIMEOUT = 120.0
GOAL = 0.15  # within 15 % at 50 % and 80 % load
BAND_WINDOWS = 200
LOW_LOAD = 0.25  # x the pace's capacity: the calibration's low load (nobody waits)
BUSY = 0.8  # the machine's share busy above which a load's figures are suspect


@dataclass(slots=True)
class Run:
    scheduled: float  # s after the phase's start (the client's clock)
    key: str = ""
    run_id: str | None = None
    status: int = 0
    done: bool = False
    error: str | None = None
    created: float | None = None  # epoch s, the run's own timestamps
    started: float | None = None
    finished: float | None = None

    @property
    def wait(self) -> float | None:
        if self.created is None or self.started is None:
            return None
        return max(0.0, self.started - self.created)

    @property
    def own_time(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started


def config(path: Path, args: argparse.Namespace) -> Path:
    path.write_text(
        "# bench/capacity.py\n"
        f"default_max_tokens = {args.tokens}\n"
        "queue_max = 100000\n"
        "max_open_streams_per_user = 100000\n"
        "signup_free_attempts_per_address = 100000\n"
        'engine = "fake"\n' + BENCH_TIERS + "max_queue_wait_seconds = 600\n" + "[fake_engine]\n"
        f"time_to_first_token_ms = {args.ttft_ms}\n"
        f"inter_token_latency_ms = {args.itl_ms}\n"
        f"output_tokens = {args.tokens}\n"
        f"slots = {args.slots}\n"
    )
    return path


async def sign_up(client: httpx.AsyncClient, n: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]

    async def one(i: int) -> str:
        email = f"capacity-{tag}-{i}@example.com"
        r = await client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
        r.raise_for_status()
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        r = await client.post("/api/keys", json={"name": "capacity"}, headers=auth)
        r.raise_for_status()
        return str(r.json()["key"])

    return [await one(i) for i in range(n)]


async def send(client: httpx.AsyncClient, run: Run, tokens: int, text: str) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {run.key}"}
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            run.status = r.status_code
            run.run_id = r.headers.get(RUN_ID_HEADER)
            if r.status_code != 200:
                await r.aread()
                run.error = f"HTTP {r.status_code}"
                return
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    run.done = True
                elif line.startswith("data:") and '"error"' in line:
                    run.error = line[:200]
    except httpx.HTTPError as e:
        run.error = f"{type(e).__name__}: {e}"


async def play(
    client: httpx.AsyncClient, keys: list[str], at: list[float], tokens: int, label: str
) -> tuple[list[Run], float]:
    """Each request sent at its time (open loop) and awaited; the runs and the epoch time of
    the schedule's zero."""
    start = time.perf_counter() + 0.05
    wall = time.time() + 0.05
    runs: list[Run] = []
    tasks = []
    for i, t in enumerate(at):
        delay = start + t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        run = Run(t, keys[i % len(keys)])
        runs.append(run)
        text = f"{label} {i}: how many replicas?"
        tasks.append(asyncio.create_task(send(client, run, tokens, text)))
    await asyncio.gather(*tasks)
    await read_runs(client, runs)
    return runs, wall


async def read_runs(client: httpx.AsyncClient, runs: list[Run]) -> None:
    gate = asyncio.Semaphore(8)

    async def one(run: Run) -> None:
        async with gate:
            r = await client.get(
                f"/api/runs/{run.run_id}", headers={"Authorization": f"Bearer {run.key}"}
            )
        if r.status_code == 200:
            body = r.json()
            run.created = _epoch(body.get("created_at"))
            run.started = _epoch(body.get("started_at"))
            run.finished = _epoch(body.get("finished_at"))

    await asyncio.gather(*(one(r) for r in runs if r.run_id))


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def poisson(rate: float, duration: float, seed: int) -> list[float]:
    """A Poisson process's arrivals over ``duration`` s given its count: ``round(rate x
    duration)`` times drawn uniformly and sorted (the order statistics of a Poisson process
    with that many arrivals), so every load offers its nominal rate, not a sample's."""
    rng = random.Random(seed)
    return sorted(rng.uniform(0, duration) for _ in range(round(rate * duration)))


# -- calibration --------------------------------------------------------------------------


@dataclass
class Calibration:
    run_time: float  # mean finished - started at low load, s
    run_cv2: float  # its Cs²
    busy_run_time: float  # the same in the closed loop, s (for the report)
    dispatch: float  # W0: mean started - created with a slot free (low load), s
    handoff: float  # a queued run's start - the finish that freed its slot, s (closed loop)
    service: float  # S: a slot's turn = run time + handoff
    samples: int
    run_times: list[float]

    def capacity(self, slots: int) -> float:
        return slots / self.service


async def calibrate(
    client: httpx.AsyncClient, keys: list[str], args: argparse.Namespace
) -> Calibration:
    engine = (args.ttft_ms + (args.tokens - 1) * args.itl_ms) / 1000
    low_rate = LOW_LOAD * args.slots / engine  # the pace's capacity, only to pick a rate
    at = poisson(low_rate, args.calibrate, args.seed - 1)
    low, _ = await play(client, keys, at, args.tokens, "low")
    waited = {id(r) for r in waiting(low)}
    waits = [w for r in low if (w := r.wait) is not None and id(r) not in waited]
    times = [t for r in low if (t := r.own_time) is not None]
    busy = await closed_loop(client, keys, args.slots + args.queued, args.saturate, args.tokens)
    handoff = handoffs(busy)
    if not waits or not times or not handoff:
        raise SystemExit("calibration measured nothing: see the processes' logs")
    run_time = _mean(times)
    return Calibration(
        run_time=run_time,
        run_cv2=squared_cv(times),
        busy_run_time=_mean([t for r in busy if (t := r.own_time) is not None]),
        dispatch=_mean(waits),
        handoff=_mean(handoff),
        service=run_time + _mean(handoff),
        samples=len(handoff),
        run_times=times,
    )


async def closed_loop(
    client: httpx.AsyncClient, keys: list[str], clients: int, seconds: float, tokens: int
) -> list[Run]:
    """``clients`` each sending its next request as its last one ends, for ``seconds``: with
    more clients than slots, runs are always queued and every finish hands its slot straight
    to a waiting run."""
    until = time.perf_counter() + seconds
    runs: list[Run] = []

    async def one(i: int) -> None:
        while time.perf_counter() < until:
            run = Run(0.0, keys[i % len(keys)])
            runs.append(run)
            await send(client, run, tokens, f"closed loop {i} {len(runs)}: how many replicas?")

    await asyncio.gather(*(one(i) for i in range(clients)))
    await read_runs(client, runs)
    return runs


def waiting(runs: list[Run]) -> list[Run]:
    """The runs that waited for a slot: a run finished between their creation and start."""
    finishes = sorted(r.finished for r in runs if r.finished is not None)
    out = []
    for r in runs:
        if r.created is not None and r.started is not None:
            i = bisect.bisect_left(finishes, r.started)
            if i and finishes[i - 1] > r.created:
                out.append(r)
    return out


def handoffs(runs: list[Run]) -> list[float]:
    """For each run that waited for a slot (a run finished between its creation and its
    start): its start - the last finish before it, the worker's part of a slot's turn
    (releasing it after the finish, dequeuing, claiming)."""
    finishes = sorted(r.finished for r in runs if r.finished is not None)
    out = []
    for r in runs:
        if r.created is None or r.started is None:
            continue
        i = bisect.bisect_left(finishes, r.started)
        if i and finishes[i - 1] > r.created:
            out.append(r.started - finishes[i - 1])
    return out


# -- one load -----------------------------------------------------------------------------


@dataclass
class Row:
    load: float
    rate: float  # offered in the window, per s
    arrivals: int
    failed: int
    run_time: float  # measured: mean finished - started under this load, s
    cpu: float  # the machine's cores busy over the load, a share (every process, not just ours)
    l_measured: float
    wq_measured: float
    # the planner's long-run figures for this rate (Erlang C x Allen-Cunneen; Little's law)
    l_predicted: float = math.nan
    wq_predicted: float = math.nan
    wq_simulated: float = math.nan  # the same queue, simulated
    wq_band: tuple[float, float] = (math.nan, math.nan)  # 10th-90th pct of a window's mean
    # the same model replayed on this window's own arrivals (the runs' created_at)
    l_replayed: float = math.nan
    wq_replayed: float = math.nan

    @property
    def l_error(self) -> float:
        return self.l_predicted / self.l_measured - 1

    @property
    def wq_error(self) -> float:
        return self.wq_predicted / self.wq_measured - 1

    @property
    def l_replay_error(self) -> float:
        return self.l_replayed / self.l_measured - 1

    @property
    def wq_replay_error(self) -> float:
        return self.wq_replayed / self.wq_measured - 1

    @property
    def in_band(self) -> bool:
        return self.wq_band[0] <= self.wq_measured <= self.wq_band[1]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def in_window(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Time-averaged count of the spans open inside [lo, hi]."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans) / (hi - lo)


def measure(runs: list[Run], wall: float, load: float, cpu: float, args: argparse.Namespace) -> Row:
    lo, hi = wall + args.ramp, wall + args.duration
    done = [r for r in runs if r.created is not None and r.finished is not None]
    inside = [r for r in runs if r.created is not None and lo <= r.created <= hi]
    return Row(
        load=load,
        rate=sum(args.ramp <= r.scheduled <= args.duration for r in runs) / (hi - lo),
        arrivals=len(runs),
        cpu=cpu,
        failed=sum(not r.done or r.error is not None for r in runs),
        run_time=_mean([t for r in inside if (t := r.own_time) is not None]),
        l_measured=in_window([(r.created or 0, r.finished or 0) for r in done], lo, hi),
        wq_measured=_mean([w for r in inside if (w := r.wait) is not None]),
    )


def predict(
    row: Row, cal: Calibration, runs: list[Run], wall: float, args: argparse.Namespace
) -> Row:
    """The planner's figures, from the calibration alone: long-run for this row's rate, and
    replayed on the runs' own arrivals."""
    slots = args.slots
    queue = Queue(row.rate, cal.service, slots, ca2=1.0, cs2=cal.run_cv2)
    shift = cal.service - cal.run_time  # the worker's own part of a slot's turn
    sim = simulate(row.rate, [t + shift for t in cal.run_times], slots, seed=args.seed)
    row.wq_predicted = cal.dispatch + queue.mean_wait
    row.wq_simulated = cal.dispatch + sim.mean_wait
    row.l_predicted = row.rate * (row.wq_predicted + cal.run_time)
    row.wq_band = window_band(row.load * cal.capacity(slots), cal, args)
    lo, hi = wall + args.ramp, wall + args.duration
    created = sorted(r.created for r in runs if r.created is not None)
    starts = fcfs_starts(created, [cal.service] * len(created), slots, cal.dispatch)
    row.wq_replayed = _mean([s - c for c, s in zip(created, starts, strict=True) if lo <= c <= hi])
    row.l_replayed = in_window(
        [(c, s + cal.run_time) for c, s in zip(created, starts, strict=True)], lo, hi
    )
    return row


def window_band(rate: float, cal: Calibration, args: argparse.Namespace) -> tuple[float, float]:
    """Where one window's mean wait falls (10th-90th percentile) when the long-run mean is the
    model's: the same queue simulated over ``BAND_WINDOWS`` windows as long as the bench's."""
    rng = random.Random(args.seed)
    means = []
    for _ in range(BAND_WINDOWS):
        at = poisson(rate, args.duration, rng.randrange(1 << 30))
        starts = fcfs_starts(at, [cal.service] * len(at), args.slots, cal.dispatch)
        waits = [s - t for t, s in zip(at, starts, strict=True) if t >= args.ramp]
        means.append(_mean(waits))
    means.sort()
    return means[BAND_WINDOWS // 10], means[BAND_WINDOWS * 9 // 10]


# -- the report ---------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:+.1%}"


def _ms(x: float) -> str:
    return "—" if math.isnan(x) or math.isinf(x) else f"{x * 1000:.1f}"


def report(cal: Calibration, rows: list[Row], args: argparse.Namespace, seconds: float) -> None:
    engine = args.ttft_ms + (args.tokens - 1) * args.itl_ms
    print(
        f"\n## bench/capacity.py: split stack, fake engine {args.slots} slots x ({args.ttft_ms:g}"
        f" ms + {args.tokens - 1} x {args.itl_ms:g} ms = {engine:g} ms a run); {cpu()}\n"
    )
    print(
        f"calibration (measured): run time {cal.run_time * 1000:.1f} ms (Cs² {cal.run_cv2:.4f}),"
        f" in the closed loop {cal.busy_run_time * 1000:.1f} ms;"
        f" dispatch W0 {cal.dispatch * 1000:.1f} ms,"
        f" handoff {cal.handoff * 1000:.1f} ms ({cal.samples} queued runs, closed loop):"
        f" S = run time + handoff = {cal.service * 1000:.1f} ms,"
        f" capacity {cal.capacity(args.slots):.2f} runs/s"
        f" (the engine's pace alone: {args.slots / engine * 1000:.2f})\n"
    )
    print("the planner's long-run prediction (Erlang C x Allen-Cunneen, Little's law):\n")
    print(
        "| load | λ runs/s | L predicted | L measured | error | Wq predicted ms"
        " | Wq simulated ms | Wq measured ms | error | a window's Wq, 10th-90th pct ms"
        " | run time ms | machine CPU | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.load:.0%} | {r.rate:.2f} | {r.l_predicted:.2f} | {r.l_measured:.2f}"
            f" | {_pct(r.l_error)} | {_ms(r.wq_predicted)} | {_ms(r.wq_simulated)}"
            f" | {_ms(r.wq_measured)} | {_pct(r.wq_error)}"
            f" | {_ms(r.wq_band[0])}-{_ms(r.wq_band[1])} ({'in' if r.in_band else 'OUT'})"
            f" | {r.run_time * 1000:.0f} | {r.cpu:.0%} | {r.failed} of {r.arrivals} |"
        )
    print("\nthe same model replayed on each window's own arrivals (the runs' created_at):\n")
    print("| load | L replayed | L measured | error | Wq replayed ms | Wq measured ms | error |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.load:.0%} | {r.l_replayed:.2f} | {r.l_measured:.2f} | {_pct(r.l_replay_error)}"
            f" | {_ms(r.wq_replayed)} | {_ms(r.wq_measured)} | {_pct(r.wq_replay_error)} |"
        )
    print()
    for r in rows:
        if r.cpu > BUSY:
            print(
                f"WARNING: at {r.load:.0%} the machine was {r.cpu:.0%} busy: parley's own"
                " overhead (the service time) grows with it; run again when it is quiet"
            )
    for r in rows:
        if r.load <= 0.8 + 1e-9:
            print(f"goals at {r.load:.0%}: " + "; ".join(goals(r)))
    print(f"\nmeasured in {seconds:.0f} s")


def goals(r: Row) -> list[str]:
    def verdict(name: str, error: float) -> str:
        ok = abs(error) <= GOAL
        return f"{name} {_pct(error)} {'met' if ok else 'NOT met'}"

    return [
        verdict("L long-run", r.l_error),
        verdict("Wq long-run", r.wq_error),
        verdict("L replayed", r.l_replay_error),
        verdict("Wq replayed", r.wq_replay_error),
    ]


# -- main ---------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    loads = [float(x) for x in args.loads.split(",") if x]
    with tempfile.TemporaryDirectory(prefix="parley-capacity-") as tmp:
        path = config(Path(tmp) / "capacity.toml", args)
        stack = start_stack(
            "split", {}, Path(tmp), args=["--config", str(path)], database_url=DATABASE_URL
        )
        try:
            cal, rows, runs = await _measure(stack, loads, args)
        finally:
            stack.stop()
    report(cal, rows, args, time.monotonic() - began)
    out = {k: v for k, v in asdict(cal).items() if k != "run_times"}
    return {
        "args": vars(args),
        "calibration": out,
        "rows": [asdict(r) for r in rows],
        "runs": {  # per load: (scheduled, created, started, finished, error) a run
            f"{load:g}": [(r.scheduled, r.created, r.started, r.finished, r.error) for r in rs]
            for load, rs in runs.items()
        },
    }


async def _measure(
    stack: Stack, loads: list[float], args: argparse.Namespace
) -> tuple[Calibration, list[Row], dict[float, list[Run]]]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1000)
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10)
    async with httpx.AsyncClient(base_url=stack.base, limits=limits, timeout=timeout) as client:
        keys = await sign_up(client, USERS)
        await play(client, keys, [i * 0.1 for i in range(2 * args.slots)], args.tokens, "warm")
        cal = await calibrate(client, keys, args)
        print(
            f"calibrated: S {cal.service * 1000:.1f} ms (handoff {cal.handoff * 1000:.1f} ms,"
            f" run time {cal.run_time * 1000:.1f} ms), W0 {cal.dispatch * 1000:.1f} ms",
            flush=True,
        )
        gc.collect()
        gc.freeze()
        rows, played = [], {}
        for i, load in enumerate(loads):
            rate = load * cal.capacity(args.slots)
            at = poisson(rate, args.duration, args.seed + i)
            busy0 = machine_busy()
            runs, wall = await play(client, keys, at, args.tokens, f"load {load:g}")
            busy1 = machine_busy()
            cpu_share = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
            played[load] = runs
            row = predict(measure(runs, wall, load, cpu_share, args), cal, runs, wall, args)
            print(
                f"{load:.0%}: L {row.l_measured:.2f} (predicted {row.l_predicted:.2f}, replayed"
                f" {row.l_replayed:.2f}), Wq {_ms(row.wq_measured)} ms (predicted"
                f" {_ms(row.wq_predicted)}, replayed {_ms(row.wq_replayed)})",
                flush=True,
            )
            rows.append(row)
            if not all(p.alive() for p in stack.procs):
                raise SystemExit("a parley process exited: see its log")
    return cal, rows, played


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--slots", type=int, default=8, help="the fake engine's")
    parser.add_argument("--ttft-ms", type=float, default=50)
    parser.add_argument("--itl-ms", type=float, default=62)
    parser.add_argument("--tokens", type=int, default=16, help="output tokens a run")
    parser.add_argument("--loads", default="0.5,0.8,0.95", help="x the measured capacity")
    parser.add_argument("--duration", type=float, default=60, help="s of arrivals a load")
    parser.add_argument("--ramp", type=float, default=5, help="s left out at a load's start")
    parser.add_argument("--calibrate", type=float, default=20, help="s of the low load")
    parser.add_argument("--saturate", type=float, default=20, help="s of the closed loop")
    parser.add_argument(
        "--queued", type=int, default=4, help="runs kept queued in it (slots + this clients)"
    )
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--json", default="", help="write the figures to PATH")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        figures = loop_runner()(main_async(args))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
