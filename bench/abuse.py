"""What hostile requests cost everyone else (issue 39): another user's login and ``/healthz``
while files meant to hurt are parsed and large bodies arrive.

    python bench/abuse.py [--pdfs 40] [--pdf-operators 100000] [--import-mb 40]
                          [--anonymous 8] [--anonymous-mb 60] [--json PATH]

One ``parley serve`` (SQLite, in-process bus, the fake engine) in a temporary folder. A
victim signs up; ``--pdfs`` attackers sign up and open a chat each. Then, one scenario after
the other, two probes run beside the attack and the server's memory is sampled:

* a login of the victim, one after the other (each a full Argon2id verification);
* ``GET /healthz``, every ``HEALTH_GAP`` s;
* the server's resident memory (``/proc/<pid>/status``), every ``MEMORY_GAP`` s.

Scenarios:

* ``idle``: nothing else, for ``IDLE_SECONDS`` (the baseline);
* ``pdfs``: each attacker uploads one PDF at once (``--pdfs`` at a time): one page drawing
  ``--pdf-operators`` text operators, a couple of KB that cost pypdf seconds of CPU;
* ``import``: one user imports a ``--import-mb`` MB ChatGPT ``conversations.json``;
* ``anonymous``: ``--anonymous`` requests with no credentials each send ``--anonymous-mb``
  MB to ``POST /api/imports`` at once.

Each scenario's probes run from its first request to its last answer. Reported: login
p50/p99, ``/healthz`` p99 and max, the server's memory growth over the idle figure (peak),
how long the attack took and how its requests were answered (by status). Goals: login p99
under 500 ms, ``/healthz`` p99 under 100 ms, memory growth under 100 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks import loop_runner, pct, start_stack
from tests.hostile import chatgpt_conversations, pdf_with_shared_stream

HEALTH_GAP = 0.02
MEMORY_GAP = 0.05
IDLE_SECONDS = 5.0
PASSWORD = "a long enough passphrase 9"  # noqa: S105 (the bench users')
ENV = {
    "PARLEY_ENGINE": "fake",
    "PARLEY_SIGNUP_FREE_ATTEMPTS_PER_ADDRESS": "10000",
    "PARLEY_LOGIN_FREE_FAILURES": "10000",
}


@dataclass
class Figures:
    scenario: str
    seconds: float
    logins: int
    login_p50_ms: float
    login_p99_ms: float
    login_max_ms: float
    health_p99_ms: float
    health_max_ms: float
    memory_growth_mb: float
    answers: dict[str, int] = field(default_factory=dict)


class Probes:
    """The victim's logins, /healthz and the server's memory, until ``stop``."""

    def __init__(self, base: str, email: str, pid: int) -> None:
        self.base, self.email, self.pid = base, email, pid
        self.logins: list[float] = []
        self.health: list[float] = []
        self.memory: list[float] = []
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as client:
            await asyncio.gather(self._login(client), self._healthz(client), self._memory())

    async def _login(self, client: httpx.AsyncClient) -> None:
        body = {"email": self.email, "password": PASSWORD}
        while not self.stopping.is_set():
            started = time.perf_counter()
            r = await client.post("/api/auth/login", json=body)
            self.logins.append(time.perf_counter() - started)
            r.raise_for_status()

    async def _healthz(self, client: httpx.AsyncClient) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            await client.get("/healthz")
            self.health.append(time.perf_counter() - started)
            await asyncio.sleep(HEALTH_GAP)

    async def _memory(self) -> None:
        while not self.stopping.is_set():
            self.memory.append(rss_mb(self.pid))
            await asyncio.sleep(MEMORY_GAP)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(
    name: str,
    base: str,
    email: str,
    pid: int,
    idle_mb: float,
    attack: Callable[[], Awaitable[Counter[str]]],
) -> Figures:
    probes = Probes(base, email, pid)
    running = asyncio.create_task(probes.run())
    started = time.perf_counter()
    answers = await attack()
    seconds = time.perf_counter() - started
    probes.stopping.set()
    await running
    ms = 1000
    return Figures(
        scenario=name,
        seconds=round(seconds, 2),
        logins=len(probes.logins),
        login_p50_ms=round(pct(probes.logins, 50) * ms, 1),
        login_p99_ms=round(pct(probes.logins, 99) * ms, 1),
        login_max_ms=round(max(probes.logins, default=float("nan")) * ms, 1),
        health_p99_ms=round(pct(probes.health, 99) * ms, 1),
        health_max_ms=round(max(probes.health, default=float("nan")) * ms, 1),
        memory_growth_mb=round(max(probes.memory, default=idle_mb) - idle_mb, 1),
        answers=dict(answers),
    )


async def signup(client: httpx.AsyncClient, email: str) -> str:
    r = await client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
    r.raise_for_status()
    token: str = r.json()["token"]
    return token


async def attackers(client: httpx.AsyncClient, n: int) -> list[tuple[str, str]]:
    """(token, chat id) of ``n`` new users, a chat each."""
    made = []
    for i in range(n):
        token = await signup(client, f"attacker{i}@example.com")
        r = await client.post("/api/chats", json={}, headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()
        made.append((token, r.json()["id"]))
    return made


def answer_of(r: httpx.Response) -> str:
    code = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        code = " " + r.json()["error"]["code"]
    return f"{r.status_code}{code}"


async def upload_pdfs(base: str, users: list[tuple[str, str]], pdf: bytes) -> Counter[str]:
    async def one(token: str, chat_id: str) -> str:
        async with httpx.AsyncClient(base_url=base, timeout=300) as client:
            r = await client.post(
                f"/api/chats/{chat_id}/attachments?filename=a.pdf",
                content=pdf,
                headers={"Authorization": f"Bearer {token}"},
            )
            return answer_of(r)

    return Counter(await asyncio.gather(*(one(t, c) for t, c in users)))


async def import_file(base: str, token: str, data: bytes) -> Counter[str]:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        r = await client.post(
            "/api/imports?filename=conversations.json",
            content=data,
            headers={"Authorization": f"Bearer {token}"},
        )
        return Counter([answer_of(r)])


async def anonymous_bodies(base: str, n: int, megabytes: int) -> Counter[str]:
    chunk = b"[" + b" " * ((1 << 20) - 1)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(megabytes):
            yield chunk

    async def one() -> str:
        async with httpx.AsyncClient(base_url=base, timeout=300) as client:
            try:
                r = await client.post(
                    "/api/imports",
                    content=body(),
                    headers={"Content-Length": str(megabytes << 20)},
                )
            except httpx.TransportError as e:  # the server answered and closed mid-body
                return f"closed ({type(e).__name__})"
            return answer_of(r)

    return Counter(await asyncio.gather(*(one() for _ in range(n))))


async def idle(seconds: float) -> Counter[str]:
    await asyncio.sleep(seconds)
    return Counter()


async def run(args: argparse.Namespace, base: str, pid: int) -> list[Figures]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        await signup(client, "victim@example.com")
        importer = await signup(client, "importer@example.com")
        users = await attackers(client, args.pdfs)
    pdf = pdf_with_shared_stream(1, args.pdf_operators)
    messages = 20
    per_chat = len(chatgpt_conversations(1, messages, "x" * 200))
    conversations = chatgpt_conversations(
        max(1, args.import_mb * (1 << 20) // per_chat), messages, "x" * 200
    )
    print(
        f"pdf: {len(pdf)} bytes, {args.pdf_operators} operators; import: "
        f"{len(conversations) / (1 << 20):.1f} MB",
        flush=True,
    )
    v = "victim@example.com"
    idle_mb = rss_mb(pid)
    figures = [await measure("idle", base, v, pid, idle_mb, lambda: idle(IDLE_SECONDS))]
    idle_mb = rss_mb(pid)
    figures.append(
        await measure("pdfs", base, v, pid, idle_mb, lambda: upload_pdfs(base, users, pdf))
    )
    idle_mb = rss_mb(pid)
    figures.append(
        await measure(
            "import", base, v, pid, idle_mb, lambda: import_file(base, importer, conversations)
        )
    )
    idle_mb = rss_mb(pid)
    figures.append(
        await measure(
            "anonymous",
            base,
            v,
            pid,
            idle_mb,
            lambda: anonymous_bodies(base, args.anonymous, args.anonymous_mb),
        )
    )
    return figures


def report(figures: list[Figures]) -> None:
    print(
        f"{'scenario':<10} {'seconds':>8} {'logins':>6} {'login p50':>10} {'login p99':>10} "
        f"{'login max':>10} "
        f"{'healthz p99':>12} {'healthz max':>12} {'memory +MB':>10}  answers"
    )
    for f in figures:
        print(
            f"{f.scenario:<10} {f.seconds:>8.1f} {f.logins:>6} {f.login_p50_ms:>8.1f}ms "
            f"{f.login_p99_ms:>8.1f}ms {f.login_max_ms:>8.1f}ms {f.health_p99_ms:>10.1f}ms "
            f"{f.health_max_ms:>10.1f}ms "
            f"{f.memory_growth_mb:>10.1f}  {dict(sorted(f.answers.items()))}"
        )
    worst = figures[1:]
    goals = [
        ("login p99 < 500 ms", all(f.login_p99_ms < 500 for f in worst)),
        ("healthz p99 < 100 ms", all(f.health_p99_ms < 100 for f in worst)),
        ("memory growth < 100 MB", all(f.memory_growth_mb < 100 for f in worst)),
    ]
    for goal, met in goals:
        print(f"goal {goal}: {'met' if met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=40)
    parser.add_argument("--pdf-operators", type=int, default=100_000)
    parser.add_argument("--import-mb", type=int, default=40)
    parser.add_argument("--anonymous", type=int, default=8)
    parser.add_argument("--anonymous-mb", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack("serve", ENV, Path(tmp))
        try:
            figures = loop_runner()(run(args, stack.base, stack.procs[0].proc.pid))
        finally:
            stack.stop()
    report(figures)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2))


if __name__ == "__main__":
    main()
