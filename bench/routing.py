"""Routing a fleet of built-in engine replicas: affinity vs. round robin vs. least loaded,
then a replica killed mid-run.

    python bench/routing.py [--users 24] [--turns 8] [--max-tokens 20] [--skip-failure]

One run, one table. Three ``parley engine serve --engine builtin`` replicas (the bundled
SmolLM2-135M, one torch thread each) run as processes; simulated users each hold a
multi-turn conversation (a system prompt of a few hundred tokens: a preamble every user
shares and notes of their own; then alternating user and assistant messages, the assistant
message being the answer actually received; a seeded think time between turns). Every
request goes through parley's real ``Router`` with the conversation id as its affinity key,
under three policies run one after another, each on freshly started replicas (cold caches):

* ``affinity``: the Router as is (consistent hashing with bounded load);
* ``round-robin``: ``pick`` overridden to cycle the replicas;
* ``least-loaded``: ``pick`` overridden to take the replica with the fewest requests in flight.

Per policy: the replicas' prefix-cache hit rate (prompt tokens found cached / looked up, from
each replica's ``GET /health`` before and after), time to first token as the client sees it
(request start to first non-empty delta) p50/p99, and the run's total time; then affinity's
TTFT p50 over round robin's (goal <= 0.5).

Then the failure phase (affinity, short probe interval and failure threshold): the same
workload, and once a third of the turns have been answered, the replica that is home to the
most conversations is SIGKILLed. Reported: how every request ended (completed, an
``EngineError``, anything else, or its deadline), which conversations were homed on the dead
replica, and whether their first turn after the router marked it unhealthy completed on
another replica. Exits non-zero if a request hit its deadline, raised anything but an
``EngineError``, or a remapped conversation's next turn failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import httpx

from parley.engines.interface import ChatMessage, Delta, EngineError, GenerationRequest
from parley.engines.router import Replica, Router
from parley.engines.sampling import GREEDY
from parley.engines.settings import ReplicaSettings, UpstreamSettings

REPO = Path(__file__).resolve().parents[1]
REPLICAS = 3

# -- the conversations ------------------------------------------------------------------------

PREAMBLE = (
    "You are Parley, the assistant of a travel and culture magazine. Answer in plain, friendly "
    "English. Keep every answer short: two or three sentences unless the reader asks for more. "
    "Prefer concrete facts (places, dates, distances, prices in local currency) over general "
    "advice, and say so plainly when you do not know. Never invent opening hours or phone "
    "numbers. When a question is ambiguous, answer the most likely reading and mention the "
    "other in one clause. Do not repeat the question back. Do not use lists unless the reader "
    "asks for one. Use the notes about the reader below to tailor the answer, but never quote "
    "them back verbatim. "
)
NAMES = ["Ada", "Brook", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "June", "Kofi"]
CITIES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Tunis", "Hanoi", "Quito", "Porto", "Riga", "Cork"]
LIKES = [
    "slow trains",
    "street food",
    "old bookshops",
    "mountain walks",
    "jazz clubs",
    "markets",
    "museums of science",
    "gardens",
    "ferries",
    "local bakeries",
    "bird watching",
    "architecture",
]
AVOIDS = ["crowds", "long flights", "spicy food", "night buses", "steep climbs", "tours"]
TOPICS = [
    "the old town",
    "the harbour",
    "local trains",
    "a day trip",
    "the food market",
    "rainy days",
    "the river",
    "museums",
    "coffee",
    "the best season",
    "bridges",
    "a quiet evening",
    "gardens",
    "bookshops",
    "the night sky",
    "festivals",
]
ASKS = [
    "What should I know about {t} in {c}?",
    "Is {t} worth an afternoon if I like {l}?",
    "Give me one tip about {t}.",
    "How would you spend two hours on {t}?",
    "What is a common mistake visitors make with {t}?",
    "Could you suggest something about {t} that avoids {a}?",
]


def system_prompt(user: int, rng: random.Random) -> str:
    """The shared preamble, then notes of this reader's own (a few hundred tokens in all)."""
    name = f"{NAMES[user % len(NAMES)]} {user}"
    notes = [f"Notes about the reader, {name}:"]
    for i in range(8):
        city, like, avoid = rng.choice(CITIES), rng.choice(LIKES), rng.choice(AVOIDS)
        notes.append(
            f"({i + 1}) {name} has been to {city}, enjoyed the {like} there, dislikes "
            f"{avoid}, and asked us to keep suggestions to walking distance."
        )
    return PREAMBLE + " ".join(notes)


def next_question(rng: random.Random) -> str:
    ask = rng.choice(ASKS)
    return ask.format(
        t=rng.choice(TOPICS), c=rng.choice(CITIES), l=rng.choice(LIKES), a=rng.choice(AVOIDS)
    )


# -- the replicas ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def parley_command() -> str:
    local = REPO / ".venv" / "bin" / "parley"
    if local.exists():
        return str(local)
    found = shutil.which("parley")
    if found is None:
        raise SystemExit("no parley command: run `make venv` (or pip install -e .) first")
    return found


def replica_env(args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    threads = str(args.threads)
    env.update(
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        HF_HUB_OFFLINE="1",
        PARLEY_BUILTIN_ENGINE__MAX_RUNNING=str(args.max_running),
        PARLEY_BUILTIN_ENGINE__KV_CACHE_TOKENS=str(args.kv_cache_tokens),
    )
    return env


def open_log(path: Path) -> IO[bytes]:
    return path.open("wb")


@dataclass
class Process:
    name: str
    port: int
    proc: asyncio.subprocess.Process
    log: Path
    out: IO[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-20:])


class Fleet:
    """Three fresh ``parley engine serve`` processes (fresh processes: cold prefix caches)."""

    def __init__(self, args: argparse.Namespace, logs: Path, phase: str) -> None:
        self.args = args
        self.logs = logs
        self.phase = phase
        self.procs: list[Process] = []
        self.client = httpx.AsyncClient(timeout=10)
        self.model = ""

    async def start(self) -> None:
        env = replica_env(self.args)
        for i in range(REPLICAS):
            port = free_port()
            log = self.logs / f"{self.phase}-r{i}.log"
            out = open_log(log)
            proc = await asyncio.create_subprocess_exec(
                parley_command(),
                *("engine", "serve", "--engine", "builtin", "--port", str(port)),
                env=env,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self.logs,
            )
            self.procs.append(Process(f"r{i}", port, proc, log, out))
        await asyncio.gather(*(self._wait_healthy(p) for p in self.procs))
        models = (await self.client.get(f"{self.procs[0].base}/v1/models")).json()
        self.model = str(models["data"][0]["id"])

    async def _wait_healthy(self, p: Process, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p.proc.returncode is not None:
                raise RuntimeError(f"replica {p.name} exited:\n{p.tail()}")
            with contextlib.suppress(httpx.TransportError):
                if (await self.client.get(f"{p.base}/health", timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(0.25)
        raise RuntimeError(f"replica {p.name} not healthy after {timeout:g} s:\n{p.tail()}")

    def replica_settings(self) -> list[ReplicaSettings]:
        return [
            ReplicaSettings(base_url=f"{p.base}/v1", slots=self.args.max_running, name=p.name)
            for p in self.procs
        ]

    async def warm_up(self) -> None:
        """One tiny unrelated request each, so no measured request pays first-call costs."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 2,
            "temperature": 0,
        }
        url = "/v1/chat/completions"
        await asyncio.gather(
            *(self.client.post(f"{p.base}{url}", json=body, timeout=120) for p in self.procs)
        )

    async def prefix_cache(self, alive: Sequence[Process] | None = None) -> tuple[int, int]:
        """(prompt tokens looked up, found cached), summed over the replicas."""
        queries = hits = 0
        for p in alive if alive is not None else self.procs:
            body: dict[str, Any] = (await self.client.get(f"{p.base}/health")).json()
            queries += int(body["prefix_cache"]["queries"])
            hits += int(body["prefix_cache"]["hits"])
        return queries, hits

    def by_name(self, name: str) -> Process:
        return next(p for p in self.procs if p.name == name)

    async def kill(self, name: str) -> None:
        p = self.by_name(name)
        p.proc.send_signal(signal.SIGKILL)
        await p.proc.wait()

    async def stop(self) -> None:
        for p in self.procs:
            if p.proc.returncode is None:
                p.proc.terminate()
        for p in self.procs:
            try:
                await asyncio.wait_for(p.proc.wait(), 20)
            except TimeoutError:
                p.proc.kill()
                await p.proc.wait()
            p.out.close()
        await self.client.aclose()


# -- the routers -------------------------------------------------------------------------------


class BenchRouter(Router):
    """parley's Router; every policy remembers where it last sent each key (one request per
    conversation is in flight at a time, so that is where the current turn went)."""

    def __init__(
        self, model: str, replicas: list[ReplicaSettings], settings: UpstreamSettings
    ) -> None:
        super().__init__(model, replicas, settings)
        self.sent_to: dict[str, str] = {}

    def noted(self, key: str, replica: Replica | None) -> Replica | None:
        if replica is not None:
            self.sent_to[key] = replica.label
        return replica

    def candidates(self, exclude: set[Replica] | frozenset[Replica]) -> list[Replica]:
        left = [r for r in self.replicas if r not in exclude]
        return [r for r in left if r.healthy] or left


class AffinityRouter(BenchRouter):
    """The Router as is: consistent hashing of the conversation id, bounded load."""

    def pick(
        self, key: str, exclude: set[Replica] | frozenset[Replica] = frozenset()
    ) -> Replica | None:
        return self.noted(key, super().pick(key, exclude))


class RoundRobinRouter(BenchRouter):
    def __init__(
        self, model: str, replicas: list[ReplicaSettings], settings: UpstreamSettings
    ) -> None:
        super().__init__(model, replicas, settings)
        self._next = itertools.count()

    def pick(
        self, key: str, exclude: set[Replica] | frozenset[Replica] = frozenset()
    ) -> Replica | None:
        pool = self.candidates(exclude)
        return self.noted(key, pool[next(self._next) % len(pool)] if pool else None)


class LeastLoadedRouter(BenchRouter):
    def __init__(
        self, model: str, replicas: list[ReplicaSettings], settings: UpstreamSettings
    ) -> None:
        super().__init__(model, replicas, settings)
        self._ties = itertools.count()

    def pick(
        self, key: str, exclude: set[Replica] | frozenset[Replica] = frozenset()
    ) -> Replica | None:
        pool = self.candidates(exclude)
        if not pool:
            return None
        turn = next(self._ties)  # ties go round, not always to the first replica
        n = len(self.replicas)
        best = min(pool, key=lambda r: (r.in_flight, (self.replicas.index(r) - turn) % n))
        return self.noted(key, best)


POLICIES: dict[str, type[BenchRouter]] = {
    "affinity": AffinityRouter,
    "round-robin": RoundRobinRouter,
    "least-loaded": LeastLoadedRouter,
}


# -- the workload ------------------------------------------------------------------------------


@dataclass
class Turn:
    """One request and how it ended."""

    user: int
    turn: int
    started: float  # perf_counter
    ended: float = 0.0
    ttft: float | None = None
    outcome: str = "completed"  # completed | engine_error | other_error | hung
    error: str = ""
    replica: str | None = None
    prompt_tokens: int | None = None
    text: str = ""


@dataclass
class Workload:
    router: BenchRouter
    args: argparse.Namespace
    turns: list[Turn] = field(default_factory=list)
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # set at each answer
    first_of: dict[str, float] = field(default_factory=dict)

    async def run(self) -> float:
        start = time.perf_counter()
        await asyncio.gather(*(self.converse(u) for u in range(self.args.users)))
        return time.perf_counter() - start

    async def converse(self, user: int) -> None:
        args = self.args
        rng = random.Random(f"{args.seed}:{user}")
        chat = chat_id(user)
        history = [ChatMessage("system", system_prompt(user, rng))]
        await asyncio.sleep(rng.uniform(0, args.think_max))  # users arrive spread out
        for t in range(args.turns):
            asked = [*history, ChatMessage("user", next_question(rng))]
            turn = await self.ask(user, t, chat, asked)
            if turn.outcome == "completed":  # a failed turn is dropped; the user asks anew
                history = [*asked, ChatMessage("assistant", turn.text)]
            await asyncio.sleep(rng.uniform(args.think_min, args.think_max))

    async def ask(self, user: int, t: int, chat: str, messages: list[ChatMessage]) -> Turn:
        request = GenerationRequest(
            request_id=f"{chat}-t{t}-{random.getrandbits(32):08x}",
            model="",  # the router sends its upstream model
            messages=messages,
            max_tokens=self.args.max_tokens,
            sampling=GREEDY,
            affinity_key=chat,
        )
        turn = Turn(user, t, time.perf_counter())
        self.turns.append(turn)
        stream = cast(AsyncGenerator[Delta, None], self.router.stream(request))
        text: list[str] = []
        deadline = asyncio.timeout(self.args.deadline)
        try:
            async with deadline:
                async for delta in stream:
                    if delta.text:
                        if turn.ttft is None:
                            turn.ttft = time.perf_counter() - turn.started
                        text.append(delta.text)
                    if delta.prompt_tokens is not None:
                        turn.prompt_tokens = delta.prompt_tokens
        except TimeoutError as e:
            turn.outcome = "hung" if deadline.expired() else "other_error"
            turn.error = (
                f"no end within {self.args.deadline:g} s" if deadline.expired() else repr(e)
            )
        except EngineError as e:
            turn.outcome, turn.error = "engine_error", f"{e.code}: {e}"
        except Exception as e:
            turn.outcome, turn.error = "other_error", repr(e)
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
        turn.ended = time.perf_counter()
        turn.replica = self.router.sent_to.get(chat)
        turn.text = "".join(text)
        self.answered.set()
        return turn

    def ended(self) -> int:
        return sum(1 for t in self.turns if t.ended)


def chat_id(user: int) -> str:
    return f"chat-{user:03d}"


# -- the phases --------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    turns: list[Turn]
    total: float
    spread: str
    hit_rate: float | None

    def count(self, outcome: str) -> int:
        return sum(1 for t in self.turns if t.outcome == outcome)

    def ttfts(self) -> list[float]:
        return [t.ttft for t in self.turns if t.ttft is not None]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else 0.0


def spread(router: Router) -> str:
    return "/".join(str(s.served) for s in router.states())


async def run_policy(name: str, args: argparse.Namespace, logs: Path) -> Row:
    fleet = Fleet(args, logs, name)
    try:
        await fleet.start()
        await fleet.warm_up()
        q0, h0 = await fleet.prefix_cache()
        router = POLICIES[name](fleet.model, fleet.replica_settings(), UpstreamSettings())
        await router.start()
        try:
            work = Workload(router, args)
            total = await work.run()
        finally:
            await router.close()
        q1, h1 = await fleet.prefix_cache()
    finally:
        await fleet.stop()
    rate = (h1 - h0) / (q1 - q0) if q1 > q0 else 0.0
    return Row(name, work.turns, total, spread(router), rate)


@dataclass
class Failure:
    victim: str = ""
    killed_after: int = 0
    killed_at: float = 0.0
    phase_start: float = 0.0
    marked_at: float | None = None
    homed: list[str] = field(default_factory=list)
    next_turns: list[Turn] = field(default_factory=list)
    without_next: int = 0


FAILURE_UPSTREAM = UpstreamSettings(
    probe_interval_seconds=0.5, failure_threshold=2, first_token_timeout_seconds=30
)


async def run_failure(args: argparse.Namespace, logs: Path) -> tuple[Row, Failure]:
    fleet = Fleet(args, logs, "failure")
    failure = Failure()
    try:
        await fleet.start()
        await fleet.warm_up()
        router = AffinityRouter(fleet.model, fleet.replica_settings(), FAILURE_UPSTREAM)
        await router.start()
        try:
            work = Workload(router, args)
            killer = asyncio.create_task(kill_midway(work, fleet, failure))
            failure.phase_start = time.perf_counter()
            total = await work.run()
            killer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await killer
        finally:
            await router.close()
    finally:
        await fleet.stop()
    judge_remapped(work, failure)
    row = Row(
        f"affinity, {failure.victim or 'none'} killed", work.turns, total, spread(router), None
    )
    return row, failure


async def kill_midway(work: Workload, fleet: Fleet, failure: Failure) -> None:
    """After a third of the turns: SIGKILL the replica home to the most conversations, then
    watch the router until it marks that replica unhealthy."""
    router = work.router
    target = max(1, work.args.users * work.args.turns // 3)
    while work.ended() < target:
        work.answered.clear()
        await work.answered.wait()
    homes = {chat_id(u): router.home(chat_id(u)) for u in range(work.args.users)}
    labels = Counter(r.label for r in homes.values() if r is not None)
    failure.victim = labels.most_common(1)[0][0]
    failure.homed = sorted(
        k for k, r in homes.items() if r is not None and r.label == failure.victim
    )
    failure.killed_after = work.ended()
    failure.killed_at = time.perf_counter()
    await fleet.kill(failure.victim)
    while True:
        state = next(s for s in router.states() if s.label == failure.victim)
        if not state.healthy:
            failure.marked_at = time.perf_counter()
            return
        await asyncio.sleep(0.02)


def judge_remapped(work: Workload, failure: Failure) -> None:
    """Each conversation homed on the dead replica: its first turn begun after the router
    marked the replica unhealthy."""
    if failure.marked_at is None:
        return
    for chat in failure.homed:
        user = int(chat.rsplit("-", 1)[1])
        later = [t for t in work.turns if t.user == user and t.started >= failure.marked_at]
        if later:
            failure.next_turns.append(min(later, key=lambda t: t.started))
        else:
            failure.without_next += 1


# -- the report --------------------------------------------------------------------------------


def table(rows: list[Row]) -> None:
    print(
        "| policy | requests | completed | EngineError | other | hung | sent per replica"
        " | prefix-cache hit rate | TTFT p50 ms | TTFT p99 ms | total s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rate = "—" if r.hit_rate is None else f"{r.hit_rate:.1%}"
        ttfts = r.ttfts()
        print(
            f"| {r.label} | {len(r.turns)} | {r.count('completed')} | {r.count('engine_error')}"
            f" | {r.count('other_error')} | {r.count('hung')} | {r.spread} | {rate}"
            f" | {pct(ttfts, 50) * 1e3:.0f} | {pct(ttfts, 99) * 1e3:.0f} | {r.total:.1f} |"
        )


def prompt_sizes(rows: list[Row], turns: int) -> str:
    def mean(t: int) -> float:
        sizes = [x.prompt_tokens for r in rows for x in r.turns if x.turn == t and x.prompt_tokens]
        return sum(sizes) / len(sizes) if sizes else 0.0

    last = mean(turns - 1)
    return (
        f"prompt tokens (the replicas' usage), mean: turn 1 {mean(0):.0f}, turn {turns} {last:.0f}"
    )


def failure_report(row: Row, f: Failure) -> tuple[list[str], list[str]]:
    """Lines about the failure phase, and the problems that fail the run."""
    if not f.victim:
        return ["failure: the kill never happened (too few turns)"], ["no replica was killed"]
    problems: list[str] = []
    lines = [
        f"failure: SIGKILLed {f.victim} after {f.killed_after} of {len(row.turns)} requests had"
        f" ended ({f.killed_at - f.phase_start:.1f} s into the run); it was home to"
        f" {len(f.homed)} conversations: {', '.join(f.homed) or 'none'}"
    ]
    if f.marked_at is None:
        problems.append(f"the router never marked {f.victim} unhealthy")
    else:
        after = f.marked_at - f.killed_at
        lines.append(f"  the router marked {f.victim} unhealthy {after:.2f} s after the kill")
    codes = Counter(t.error.split(":", 1)[0] for t in row.turns if t.outcome == "engine_error")
    lines.append(
        f"  requests: {row.count('completed')} completed, {row.count('engine_error')} failed with"
        f" an EngineError ({', '.join(f'{k} {v}' for k, v in codes.items()) or 'none'}),"
        f" {row.count('other_error')} with another exception, {row.count('hung')} hit the deadline"
    )
    ok = [t for t in f.next_turns if t.outcome == "completed" and t.replica != f.victim]
    where = Counter(t.replica or "?" for t in ok)
    lines.append(
        f"  remapped conversations' next turns (begun after the mark): {len(ok)} of"
        f" {len(f.next_turns)} completed on another replica"
        f" ({', '.join(f'{k} {v}' for k, v in sorted(where.items())) or 'none'});"
        f" {f.without_next} conversations had no turn left"
    )
    for t in f.next_turns:
        if t not in ok:
            problems.append(
                f"{chat_id(t.user)} turn {t.turn + 1} after the mark: {t.outcome} on"
                f" {t.replica} {t.error}"
            )
    return lines, problems


def other_errors(rows: list[Row]) -> list[str]:
    return [
        f"{r.label}: {chat_id(t.user)} turn {t.turn + 1}: {t.outcome}: {t.error}"
        for r in rows
        for t in r.turns
        if t.outcome in ("hung", "other_error")
    ]


# -- main --------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=20)
    parser.add_argument("--think-min", type=float, default=0.5, help="seconds")
    parser.add_argument("--think-max", type=float, default=2.0, help="seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--deadline", type=float, default=90, help="seconds per request")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--skip-failure", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per replica")
    parser.add_argument("--max-running", type=int, default=16, help="per replica")
    parser.add_argument("--kv-cache-tokens", type=int, default=32_768, help="per replica")
    args = parser.parse_args()
    unknown = set(args.policies.split(",")) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; choose from {list(POLICIES)}")
    if args.users < 1 or args.turns < 1 or args.think_min > args.think_max:
        parser.error("need users >= 1, turns >= 1 and think-min <= think-max")
    return args


def progress(row: Row, start: float) -> None:
    rate = "" if row.hit_rate is None else f", prefix-cache hit rate {row.hit_rate:.1%}"
    print(
        f"  {row.label}: {row.count('completed')}/{len(row.turns)} completed, TTFT p50"
        f" {pct(row.ttfts(), 50) * 1e3:.0f} ms{rate} ({time.perf_counter() - start:.0f} s)",
        flush=True,
    )


async def main() -> int:
    args = parse_args()
    task = asyncio.current_task()
    if task is not None:  # SIGTERM: unwind, so the replicas are stopped
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    start = time.perf_counter()
    print(
        f"routing: {REPLICAS} x parley engine serve --engine builtin ({args.threads} torch"
        f" thread(s), max_running {args.max_running}, kv cache {args.kv_cache_tokens} tokens"
        f" each); {args.users} users x {args.turns} turns, max_tokens {args.max_tokens}, think"
        f" {args.think_min:g}-{args.think_max:g} s, seed {args.seed}",
        flush=True,
    )
    rows: list[Row] = []
    lines: list[str] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="parley-routing-") as tmp:
        logs = Path(tmp)
        for name in args.policies.split(","):
            rows.append(await run_policy(name, args, logs))
            progress(rows[-1], start)
        if not args.skip_failure:
            row, failure = await run_failure(args, logs)
            rows.append(row)
            lines, problems = failure_report(row, failure)
            progress(row, start)
    print()
    table(rows)
    print()
    print(prompt_sizes(rows, args.turns))
    by = {r.label: r for r in rows}
    if "affinity" in by and "round-robin" in by:
        ratio = pct(by["affinity"].ttfts(), 50) / max(1e-9, pct(by["round-robin"].ttfts(), 50))
        met = "met" if ratio <= 0.5 else "NOT met"
        print(f"affinity / round-robin TTFT p50: {ratio:.2f} (goal <= 0.5: {met})")
    for line in lines:
        print(line)
    problems = other_errors(rows) + problems
    for p in problems:
        print(f"PROBLEM: {p}")
    hung = sum(r.count("hung") for r in rows)
    verdict = "FAILED" if problems else "ok"
    print(
        f"summary: {verdict}; {sum(len(r.turns) for r in rows)} requests in"
        f" {len(rows)} runs, {hung} hung, {len(problems)} problems,"
        f" {time.perf_counter() - start:.0f} s in all"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
