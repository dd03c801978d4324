"""What a Postgres failover costs parley's split stack, and what a read replica buys.

    python bench/failover.py [--switchovers 2] [--crashes 1] [--fast-monitor]
                             [--readers 16] [--read-seconds 10] [--skip failover|reads]

Starts a pg_auto_failover formation from Debian's packages (a monitor and two nodes on this
machine: ``tests/faults/pgaf.py``) and runs parley's split stack on it (two ``parley api``
processes and a ``parley worker``, the fake engine) with every node in its URLs, the libpq
way (``target_session_attrs=read-write`` for the primary, ``prefer-standby`` for reads).

Part 1, failovers under steady load (``tests/faults/load.py``: users streaming, sending,
reading history, and a probe sending a short message every 0.1 s): ``--switchovers`` times
``pg_autoctl perform failover`` (a planned switchover), then ``--crashes`` times the primary's
``pg_autoctl`` and Postgres killed with SIGKILL (a crashed host: the monitor's health checks
must give up on it first; ``--fast-monitor`` shortens them). For each failover: the
write-unavailability window (the longest gap between the probe's accepted sends around it),
when the formation settled, and the error mix of every answer in that stretch, by kind.

Part 2, read throughput: ``--readers`` users page their chat list and history (20 messages a
page) as fast as they are answered, for ``--read-seconds``, first against api processes
given only the primary, then against api processes given the replica too; reads a second,
latency p50/p99, and the transactions each node served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from stacks import REDIS_URL, Proc, free_port, loop_runner, pct, wait_ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness in tests/faults

from tests.faults.load import LOAD_TIERS, Load, User, check_stored
from tests.faults.pgaf import Formation, unavailable

STEADY_SECONDS = 5.0


def stack_env(formation: Formation, *, replica: bool) -> dict[str, str]:
    env = {
        "PARLEY_DATABASE_URL": formation.primary_url,
        "PARLEY_REDIS_URL": REDIS_URL,
        "PARLEY_REDIS_NAMESPACE": f"bench-failover-{uuid.uuid4().hex[:8]}",
        "PARLEY_ENGINE": "fake",
        "PARLEY_TIERS": json.dumps(LOAD_TIERS),
        "PARLEY_DATABASE_CONNECT_TIMEOUT_SECONDS": "2",
        "PARLEY_READ_YOUR_WRITES_SECONDS": "1",
        "PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS": "20",
        "PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS": "30",
        "PARLEY_FAKE_ENGINE__OUTPUT_TOKENS": "30",
        "PARLEY_FAKE_ENGINE__SLOTS": "32",
        "PARLEY_LOG_FORMAT": "json",
    }
    if replica:
        env["PARLEY_DATABASE_REPLICA_URL"] = formation.replica_url
    return env


def start(
    env: dict[str, str], tmp: Path, apis: int = 2, *, worker: bool = True
) -> tuple[list[str], list[Proc]]:
    """``apis`` api processes (and a worker); their base URLs and the processes."""
    procs = []
    if worker:
        procs.append(Proc(["worker"], env, tmp / f"worker-{uuid.uuid4().hex[:6]}.log"))
    bases = []
    for _ in range(apis):
        port = free_port()
        procs.append(Proc(["api", "--port", str(port)], env, tmp / f"api-{port}.log"))
        bases.append(f"http://127.0.0.1:{port}")
    try:
        for base in bases:
            wait_ready(base, procs=tuple(procs))
    except BaseException:
        stop(procs)
        raise
    return bases, procs


def stop(procs: list[Proc]) -> None:
    for p in procs:
        p.stop()


# -- part 1: failovers under load --------------------------------------------------------


async def failovers(formation: Formation, tmp: Path, args: argparse.Namespace) -> None:
    bases, procs = await asyncio.to_thread(start, stack_env(formation, replica=True), tmp)
    load = Load(bases, streamers=4, senders=4, readers=4)
    try:
        await load.prepare()
        load.start()
        await asyncio.sleep(STEADY_SECONDS)
        kinds = ["switchover"] * args.switchovers + ["crash"] * args.crashes
        print(f"\nPart 1: {len(kinds)} failovers under load ({', '.join(kinds)})")
        for n, kind in enumerate(kinds, 1):
            await one_failover(formation, load, n, kind)
        await load.stop()
        stored = await check_stored(formation.primary_url, load.record)  # the sweepers run
    finally:
        await load.stop()
        stop(procs)
    record = load.record
    print(
        f"\n  stored: runs {stored.runs}; "
        + ("; ".join(stored.problems()) or "every accepted message once, none twice, "
           "every streamed answer as stored")
    )  # fmt: skip
    print(
        f"\n  over the whole run: {sum(record.statuses.values())} answers, "
        f"{len(record.server_errors)} 5xx other than 503, {len(record.unexpected)} other "
        f"refusals, transport errors {dict(record.transport_errors) or 'none'}, "
        f"{len(record.unfinished)} messages never accepted, {record.resumes} stream resumes"
    )


async def one_failover(formation: Formation, load: Load, n: int, kind: str) -> None:
    before_primary = await asyncio.to_thread(formation.primary)
    before = Counter(load.record.statuses)
    started = time.monotonic()
    if kind == "switchover":
        settled = await asyncio.to_thread(formation.failover)
        promoted = None
    else:
        promoted, settled = await asyncio.to_thread(formation.crash_primary)
    await asyncio.sleep(STEADY_SECONDS)
    after_primary = await asyncio.to_thread(formation.primary)
    window = load.record.probe_gaps(started, started + settled)
    mix = Counter(load.record.statuses)
    mix.subtract(before)
    answers = ", ".join(f"{k} {s}: {c}" for (k, s), c in sorted(mix.items()) if c)
    errors = sum(c for (_, s), c in mix.items() if s >= 400)
    print(f"\n  failover {n} ({kind}): {before_primary} -> {after_primary}")
    if promoted is not None:
        print(f"    standby promoted by the monitor after {promoted:.1f} s")
    print(f"    writes unavailable: {window:.2f} s (longest gap between accepted probe sends)")
    print(f"    formation settled (old primary a standby again) after {settled:.1f} s")
    print(f"    answers from the failover to {STEADY_SECONDS:g} s after it settled: {answers}")
    print(f"    refused (all 503 unless listed above): {errors} of {sum(mix.values())}")


# -- part 2: read throughput ---------------------------------------------------------------


@dataclass
class Reads:
    """One stack's reads: latencies of the answered ones, refusals, seconds measured, and
    the transactions each node committed meanwhile."""

    latencies: list[float] = field(default_factory=list)
    refused: int = 0
    seconds: float = 0.0
    transactions: Counter[str] = field(default_factory=Counter)
    rates: list[float] = field(default_factory=list)  # reads a second, per slice


async def read_for(load: Load, users: list[User], seconds: float, out: Reads) -> None:
    """Every user pages its chat list and its history (20 a page) for ``seconds``."""
    deadline = time.monotonic() + seconds

    async def reader(user: User) -> None:
        paths = ["/api/chats", f"/api/chats/{user.chat_id}/messages?limit=20"]
        while time.monotonic() < deadline:
            for path in paths:
                t0 = time.monotonic()
                r = await load.client(user).get(path, headers=user.auth)
                if r.status_code == 200:
                    out.latencies.append(time.monotonic() - t0)
                else:
                    out.refused += 1

    answered = len(out.latencies)
    await asyncio.gather(*(reader(user) for user in users))
    out.seconds += seconds
    out.rates.append((len(out.latencies) - answered) / seconds)


async def node_transactions(formation: Formation) -> dict[str, int]:
    """Committed transactions of parley's database on each node, labelled by its role."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    counts = {}
    roles = {s.name: s.reported for s in await asyncio.to_thread(formation.states)}
    for name in formation.ports:
        url = formation.node_url(name).replace("postgresql://", "postgresql+asyncpg://")
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                query = "SELECT xact_commit FROM pg_stat_database WHERE datname = 'parley'"
                counts[f"{name} ({roles.get(name)})"] = int(await conn.scalar(text(query)))
        finally:
            await engine.dispose()
    return counts


async def reads(formation: Formation, tmp: Path, args: argparse.Namespace) -> None:
    """Two sets of api processes on the same formation (no worker: reads need none), one
    given only the primary, one the replica too; measured in alternating slices, so the
    machine's other load falls on both alike."""
    print(
        f"\nPart 2: read throughput, {args.readers} readers (chat list + a history page of 20), "
        f"{args.rounds} rounds of {args.read_seconds:g} s per stack, alternating"
    )
    stacks: dict[str, tuple[list[str], list[Proc]]] = {}
    loads: dict[str, Load] = {}
    results = {label: Reads() for label in ("primary only", "with the replica")}
    try:
        for label in results:
            env = stack_env(formation, replica=label == "with the replica")
            stacks[label] = await asyncio.to_thread(start, env, tmp, worker=False)
        seeding = loads["seed"] = Load(
            stacks["primary only"][0], streamers=0, senders=0, readers=args.readers
        )
        await seeding.prepare(history=10)
        users = seeding.users["reader"]
        for label in results:
            loads[label] = Load(stacks[label][0], streamers=0, senders=0, readers=0)
        await asyncio.sleep(1.5)  # the seeding writes' read-your-writes window lapses
        for _ in range(args.rounds):
            for label, out in results.items():
                before = await node_transactions(formation)
                await read_for(loads[label], users, args.read_seconds, out)
                after = await node_transactions(formation)
                out.transactions.update({k: after[k] - before[k] for k in after})
    finally:
        for load in loads.values():
            await load.stop()
        for _, procs in stacks.values():
            stop(procs)
    for label, out in results.items():
        rate = len(out.latencies) / out.seconds
        nodes = ", ".join(f"{k}: {v}" for k, v in out.transactions.items())
        print(
            f"  {label:17} {rate:7.1f} reads/s  p50 {pct(out.latencies, 50) * 1000:6.1f} ms  "
            f"p99 {pct(out.latencies, 99) * 1000:6.1f} ms  refused {out.refused}"
        )
        print(f"  {'':17} slices: {', '.join(f'{r:.0f}' for r in out.rates)} reads/s")
        print(f"  {'':17} transactions committed: {nodes}")
        on_primary = sum(v for k, v in out.transactions.items() if "(primary)" in k)
        print(f"  {'':17} primary transactions per read: {on_primary / len(out.latencies):.2f}")
    primary, replica = (len(r.latencies) / r.seconds for r in results.values())
    print(f"  ratio (with / without the replica): {replica / primary:.2f}x")


async def main(args: argparse.Namespace) -> None:
    reason = unavailable()
    if reason:
        raise SystemExit(f"pg_auto_failover cannot run here: {reason}")
    formation = Formation()
    tmp = Path(tempfile.mkdtemp(prefix="parley-bench-failover-"))
    try:
        t0 = time.monotonic()
        await asyncio.to_thread(formation.start)
        print(f"formation up in {time.monotonic() - t0:.1f} s: {formation.states()}")
        if args.fast_monitor:
            formation.tune_monitor(
                node_considered_unhealthy_timeout="5s",
                primary_demote_timeout="10s",
                health_check_period="2s",
            )
            print("monitor: unhealthy after 5 s, demote timeout 10 s, health checks every 2 s")
        if "failover" not in args.skip:
            await failovers(formation, tmp, args)
        if "reads" not in args.skip:
            await reads(formation, tmp, args)
    finally:
        await asyncio.to_thread(formation.stop)
    print(f"\nprocess logs: {tmp}")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--switchovers", type=int, default=2)
    p.add_argument("--crashes", type=int, default=1)
    p.add_argument("--fast-monitor", action="store_true")
    p.add_argument("--readers", type=int, default=16)
    p.add_argument("--read-seconds", type=float, default=5.0, help="one slice of reads")
    p.add_argument("--rounds", type=int, default=4, help="slices per stack, alternating")
    p.add_argument("--skip", default="", help="failover and/or reads, comma-separated")
    return p.parse_args()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    loop_runner()(main(parse()))
