"""Steady load on parley's split stack through the public API, recorded for the failover test
(``tests/faults/test_failover.py``) and ``bench/failover.py``.

Four kinds of user, each with a chat of their own, spread over the api processes:

* **streamers** send a message with its answer streamed (SSE) and follow the run to ``done``
  as the web UI does: a 503 is retried after its Retry-After with the same Idempotency-Key;
  a stream that ends with ``dependency_unavailable`` or is cut resumes from its last event
  id on the other api process (or the POST is sent again, same key, if the run's id was not
  known yet); the text assembled is kept per run;
* **senders** send messages (JSON) and, on a 503, send again after Retry-After with the same
  Idempotency-Key until one is accepted;
* **readers** page their chat list and history;
* some sends (every third of a sender's, every third stream) have their response **dropped**
  after the server answered it (``DroppingTransport``: the commit happened, the client sees
  the connection fail) and are sent again with their key; some streams are **cut** by the
  client after a few deltas and resumed from their last event id on the other api process;
* the **probe** sends a short message every ``probe_interval`` s and on a 503 retries the
  same key every ``probe_interval`` s: the gaps between its accepted sends are what a
  failover costs writes.

Every answer is recorded (``Record``): statuses by kind, any 5xx that is not a 503 with its
body, transport errors, each message accepted (content → run id), each streamed answer,
successful reads (for throughput), the probe's accepted times, and how many responses were
dropped and streams cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.sse import events

# A tier no part of the load runs into (budgets, slots, load shedding).
LOAD_TIERS = {
    "free": {
        "priority": 0,
        "tokens_per_minute": 100_000_000,
        "burst_tokens": 100_000_000,
        "max_concurrent_runs": 1000,
        "max_output_tokens": 4096,
    }
}
PASSWORD = "correct horse battery staple"
JSON = {"Accept": "application/json"}
CUT_AFTER = 5  # deltas a cut stream's first connection takes
SSE = {"Accept": "text/event-stream"}


@dataclass
class Record:
    started: float = field(default_factory=time.monotonic)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # 5xx other than 503
    unexpected: list[str] = field(default_factory=list)  # other non-2xx, non-503 answers
    transport_errors: Counter[str] = field(default_factory=Counter)
    accepted: dict[str, str] = field(default_factory=dict)  # content -> run id (2xx)
    unfinished: list[str] = field(default_factory=list)  # contents never accepted
    streamed: dict[str, str] = field(default_factory=dict)  # run id -> text its stream gave
    stream_errors: Counter[str] = field(default_factory=Counter)  # error events by code
    resumes: int = 0
    dropped: list[str] = field(default_factory=list)  # contents whose response was dropped
    cuts: int = 0  # streams the client cut and resumed
    reads: list[float] = field(default_factory=list)  # completion times of 2xx reads
    probe_ok: list[float] = field(default_factory=list)  # completion times of accepted sends

    def saw(self, kind: str, r: httpx.Response) -> None:
        self.statuses[(kind, r.status_code)] += 1
        if r.status_code >= 500 and r.status_code != 503:
            self.server_errors.append(f"{kind} {r.status_code}: {r.text[:300]}")
        elif r.status_code >= 400 and r.status_code != 503:
            self.unexpected.append(f"{kind} {r.status_code}: {r.text[:300]}")

    def status_mix(self) -> dict[str, int]:
        return {f"{kind} {status}": n for (kind, status), n in sorted(self.statuses.items())}

    def probe_gaps(self, start: float, end: float) -> float:
        """The longest time between two accepted probe sends around [start, end]: how long
        writes were unavailable (an upper bound: it includes one request's latency)."""
        times = [t for t in self.probe_ok if start - 5 <= t <= end + 30]
        inside = [b - a for a, b in itertools.pairwise(times) if b >= start]
        return max(inside, default=float("nan"))


class DroppingTransport(httpx.AsyncBaseTransport):
    """Drops, once, the 2xx response to a request whose Idempotency-Key is in ``keys``: the
    server handled the request (its commit made) and began to answer; the client sees the
    connection fail, as when a proxy or a network loses a response."""

    def __init__(self, keys: set[str]) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.keys = keys

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        key = request.headers.get("Idempotency-Key")
        if key is None or key not in self.keys or not 200 <= response.status_code < 300:
            return response  # a refusal (503) is not dropped: the drop follows a commit
        self.keys.discard(key)
        await response.aclose()
        raise httpx.ReadError("the test dropped this response", request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class User:
    email: str
    auth: dict[str, str]
    chat_id: str
    home: int  # the index of its api process


class Load:
    """Users on ``bases`` (api processes' base URLs); ``run(seconds)`` or ``start()`` /
    ``stop()`` around what the caller does meanwhile."""

    def __init__(
        self,
        bases: list[str],
        *,
        streamers: int = 2,
        senders: int = 2,
        readers: int = 2,
        probe_interval: float = 0.1,
        stream_max_tokens: int | None = None,
    ) -> None:
        self.bases = bases
        self.counts = {"streamer": streamers, "sender": senders, "reader": readers, "probe": 1}
        self.probe_interval = probe_interval
        self.stream_max_tokens = stream_max_tokens
        self.record = Record()
        self.users: dict[str, list[User]] = {}
        self._drop: set[str] = set()  # Idempotency-Keys whose response is to be dropped
        self._clients = [
            httpx.AsyncClient(
                base_url=b,
                timeout=httpx.Timeout(30, connect=5),
                transport=DroppingTransport(self._drop),
            )
            for b in bases
        ]
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def client(self, user: User, other: bool = False) -> httpx.AsyncClient:
        return self._clients[(user.home + other) % len(self._clients)]

    async def prepare(self, history: int = 3) -> None:
        """Sign every user up, each with a chat; readers' chats get ``history`` turns."""
        n = 0
        for kind, count in self.counts.items():
            self.users[kind] = []
            for _ in range(count):
                self.users[kind].append(await self._new_user(kind, n))
                n += 1
        for user in self.users["reader"]:
            for turn in range(history):
                await self._send_until_accepted(user, f"{user.email} history {turn}", "seed")

    async def _new_user(self, kind: str, n: int) -> User:
        client = self._clients[n % len(self._clients)]
        email = f"{kind}{n}-{uuid.uuid4().hex[:8]}@example.com"
        r = await client.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
        assert r.status_code == 201, r.text
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        chat = await client.post("/api/chats", json={"title": kind}, headers=auth)
        assert chat.status_code == 201, chat.text
        return User(email, auth, chat.json()["id"], n % len(self._clients))

    def start(self) -> None:
        loops = {"streamer": self._streamer, "sender": self._sender, "reader": self._reader}
        for kind, users in self.users.items():
            for user in users:
                loop = self._probe(user) if kind == "probe" else loops[kind](user)
                self._tasks.append(asyncio.create_task(loop, name=f"{kind} {user.email}"))

    async def stop(self, grace: float = 60) -> None:
        """Stop starting new messages; let each user finish the one in hand (``grace`` s)."""
        if self._stopping.is_set():
            return  # stopped already
        self._stopping.set()
        try:
            if self._tasks:
                done, pending = await asyncio.wait(self._tasks, timeout=grace)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                for task in done:
                    task.result()  # a bug in the load itself fails loudly
        finally:
            for client in self._clients:
                await client.aclose()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- senders and the probe --------------------------------------------------------------

    async def _sender(self, user: User) -> None:
        n = 0
        while not self._stopping.is_set():
            drop = n % 3 == 1
            await self._send_until_accepted(user, f"{user.email} says {n}", "send", drop=drop)
            n += 1
            await self._pause(0.3)

    async def _probe(self, user: User) -> None:
        n = 0
        while not self._stopping.is_set():
            content = f"{user.email} probe {n}"
            await self._send_until_accepted(
                user, content, "probe", retry=self.probe_interval, max_tokens=2
            )
            n += 1
            await self._pause(self.probe_interval)

    async def _send_until_accepted(
        self,
        user: User,
        content: str,
        kind: str,
        *,
        retry: float | None = None,
        max_tokens: int | None = None,
        drop: bool = False,
    ) -> None:
        """POST the message until accepted (2xx), the same Idempotency-Key each time; a
        503 waits its Retry-After (or ``retry`` s). Given up 60 s after the load stopped.
        ``drop``: the first response the server gives is dropped."""
        key = self._key(content, drop)
        body: dict[str, Any] = {"content": content}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        give_up: float | None = None
        while True:
            r = await self._post(user, body, key, kind, JSON)
            if r is not None and r.is_success:
                self.record.accepted[content] = r.json()["run_id"]
                if kind == "probe":
                    self.record.probe_ok.append(time.monotonic())
                return
            if self._stopping.is_set():
                give_up = give_up or time.monotonic() + 60
                if time.monotonic() > give_up:
                    self.record.unfinished.append(content)
                    return
            await asyncio.sleep(retry if retry is not None else _retry_after(r))

    def _key(self, content: str, drop: bool) -> str:
        key = uuid.uuid4().hex
        if drop:
            self._drop.add(key)
            self.record.dropped.append(content)
        return key

    async def _post(
        self, user: User, body: dict[str, Any], key: str, kind: str, accept: dict[str, str]
    ) -> httpx.Response | None:
        try:
            r = await self.client(user).post(
                f"/api/chats/{user.chat_id}/messages",
                json=body,
                headers={**user.auth, **accept, "Idempotency-Key": key},
            )
        except httpx.TransportError as e:
            self.record.transport_errors[f"{kind} {type(e).__name__}"] += 1
            return None
        self.record.saw(kind, r)
        return r

    # -- readers ----------------------------------------------------------------------------

    async def _reader(self, user: User) -> None:
        while not self._stopping.is_set():
            for path in ("/api/chats", f"/api/chats/{user.chat_id}/messages?limit=20"):
                try:
                    r = await self.client(user).get(path, headers={**user.auth, **JSON})
                except httpx.TransportError as e:
                    self.record.transport_errors[f"read {type(e).__name__}"] += 1
                    await self._pause(0.5)
                    continue
                self.record.saw("read", r)
                if r.is_success:
                    self.record.reads.append(time.monotonic())
                else:
                    await self._pause(_retry_after(r))

    # -- streamers --------------------------------------------------------------------------

    async def _streamer(self, user: User) -> None:
        n = 0
        while not self._stopping.is_set():
            await self._stream_one(
                user, f"{user.email} streams {n}", drop=n % 3 == 2, cut=n % 3 == 1
            )
            n += 1
            await self._pause(0.2)

    async def _stream_one(self, user: User, content: str, *, drop: bool, cut: bool) -> None:
        """One message streamed to its ``done``, across refusals, error events and cuts;
        ``drop``: the first response to its POST is dropped; ``cut``: the client cuts its
        first connection after ``CUT_AFTER`` deltas."""
        key = self._key(content, drop)
        body: dict[str, Any] = {"content": content}
        if self.stream_max_tokens is not None:
            body["max_tokens"] = self.stream_max_tokens
        state: dict[str, Any] = {
            "run": None,
            "last": None,
            "text": "",
            "wait": 0.0,
            "cut": CUT_AFTER if cut else None,
        }
        give_up = None
        while True:
            done = await self._follow(user, body, key, state)
            if done:
                self.record.accepted[content] = state["run"]
                self.record.streamed[state["run"]] = state["text"]
                return
            if self._stopping.is_set():
                give_up = give_up or time.monotonic() + 60
                if time.monotonic() > give_up:
                    self.record.unfinished.append(content)
                    return
            await asyncio.sleep(state["wait"] or 0.5)
            state["wait"] = 0.0
            self.record.resumes += 1

    async def _follow(
        self, user: User, body: dict[str, Any], key: str, state: dict[str, Any]
    ) -> bool:
        """One connection's worth of the stream; True once ``done`` came."""
        run_id = state["run"]
        client = self.client(user, other=run_id is not None)  # a resume: the other process
        if run_id is None:
            request = client.build_request(
                "POST",
                f"/api/chats/{user.chat_id}/messages",
                json=body,
                headers={**user.auth, **SSE, "Idempotency-Key": key},
            )
        else:
            last = {"Last-Event-ID": state["last"]} if state["last"] else {}
            request = client.build_request(
                "GET", f"/api/runs/{run_id}/events", headers={**user.auth, **SSE, **last}
            )
        kind = "stream" if run_id is None else "resume"
        try:
            response = await client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    await response.aread()
                    self.record.saw(kind, response)
                    state["wait"] = _retry_after(response)
                    return False
                self.record.saw(kind, response)
                return await self._consume(response, state)
            finally:
                await response.aclose()
        except (httpx.TransportError, json.JSONDecodeError) as e:
            self.record.transport_errors[f"{kind} {type(e).__name__}"] += 1
            return False

    async def _consume(self, response: httpx.Response, state: dict[str, Any]) -> bool:
        async for ev in events(response):
            if ev.id is not None:
                state["last"] = ev.id
            if ev.event == "status":
                state["run"] = ev.data["run_id"]
            elif ev.event == "delta":
                replace = bool(ev.data.get("replace"))
                state["text"] = ev.data["text"] if replace else state["text"] + ev.data["text"]
                if state["cut"] is not None and ev.id is not None:
                    state["cut"] -= 1
                    if state["cut"] == 0:  # the client goes away mid-answer, then resumes
                        state["cut"] = None
                        self.record.cuts += 1
                        return False
            elif ev.event == "error":
                self.record.stream_errors[ev.data["code"]] += 1
                if ev.data["code"] == "dependency_unavailable":
                    state["wait"] = float(ev.data.get("retry_after") or 1)
                    return False
            elif ev.event == "done":
                return True
        if state["last"] is None:  # nothing had an id: a replay from the start follows
            state["text"] = ""
        return False


def _retry_after(r: httpx.Response | None) -> float:
    if r is None:
        return 0.5
    with contextlib.suppress(ValueError):
        return min(float(r.headers.get("Retry-After", "1")), 5.0)
    return 1.0


@dataclass
class Stored:
    """What the database holds after a load: runs by status, and what went wrong."""

    runs: dict[str, int]
    twice: dict[str, int]  # user messages stored more than once, by content
    missing: list[str]  # accepted messages not stored exactly once
    differ: dict[str, tuple[str, str | None]]  # run -> (text streamed, answer stored)
    not_completed: dict[str, str]  # accepted runs that did not end completed -> their status

    @property
    def open_runs(self) -> dict[str, int]:
        return {s: n for s, n in self.runs.items() if s in ("queued", "running")}

    def problems(self) -> list[str]:
        found = []
        if self.open_runs:
            found.append(f"runs never ended: {self.open_runs}")
        if self.twice:
            found.append(f"messages stored twice: {list(self.twice.items())[:5]}")
        if self.missing:
            found.append(f"accepted messages not stored once: {self.missing[:5]}")
        if self.not_completed:
            found.append(f"accepted runs not completed: {list(self.not_completed.items())[:5]}")
        if self.differ:
            found.append(f"streamed answers unlike the stored: {list(self.differ.items())[:3]}")
        return found


async def check_stored(database_url: str, record: Record, *, wait: float = 60) -> Stored:
    """Once every run has ended (``wait`` s at most): every accepted message stored once,
    none twice, every streamed answer as stored."""
    from sqlalchemy import func, select

    from parley.domain import MessageRole, RunStatus
    from parley.store.database import Database
    from parley.store.schema import Message, Run

    db = Database(database_url)
    try:
        deadline = time.monotonic() + wait
        while True:
            async with db.transaction() as s:
                rows = await s.execute(select(Run.status, func.count()).group_by(Run.status))
            runs = {RunStatus(status).value: n for status, n in rows.all()}
            if not {"queued", "running"} & set(runs) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        async with db.transaction() as s:
            query = select(Message.content).where(Message.role == MessageRole.USER)
            users = Counter((await s.scalars(query)).all())
            on = Message.id == Run.assistant_message_id
            joined = await s.execute(select(Run.id, Message.content).join(Message, on))
            answers: dict[str, str] = {run: text for run, text in joined.all()}
            ends = await s.execute(select(Run.id, Run.status))
            statuses = {run: RunStatus(status).value for run, status in ends.all()}
    finally:
        await db.dispose()
    return Stored(
        runs=runs,
        twice={content: n for content, n in users.items() if n > 1},
        missing=[content for content in record.accepted if users[content] != 1],
        differ={
            run: (text, answers.get(run))
            for run, text in record.streamed.items()
            if answers.get(run) != text
        },
        not_completed={
            run: statuses.get(run, "missing")
            for run in record.accepted.values()
            if statuses.get(run) != RunStatus.COMPLETED.value
        },
    )
