"""The split stack in real containers (issue 47): `make stack-test`, after `make image`.

Brings deploy/compose.yaml up (podman-compose), then through the proxy: signs up, streams an
answer; kills the worker container generating an answer (the run still ends: nothing left
in progress); stops and starts Redis while sending (503 with Retry-After, then accepted; no
other 5xx); stops and starts each api container in turn while a client streams (it resumes
by Last-Event-ID through the proxy: every event once, in order, the text as stored); then
measures the image, the time to ready, and each container's memory idle and under 50
streams; and brings the stack down (its volumes too). Prints a report; exits 1 on a failure.
Not part of `make test` (it builds images: minutes); skips, saying so, without podman.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).parents[1]
COMPOSE = [str(ROOT / "build/compose/bin/podman-compose"), "-f", str(ROOT / "deploy/compose.yaml")]
PORT = int(os.environ.get("PARLEY_PORT", "8080"))
BASE = f"http://127.0.0.1:{PORT}"
IMAGE = "localhost/parley:local"
PASSWORD = "a long enough pass phrase"
report: dict[str, Any] = {}


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def run(*args: str, check: bool = True) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr[-2000:]}")
    return done.stdout


def container(service: str) -> str:
    return f"parley_{service}_1"


def wait(what: str, ready: Callable[[], bool], timeout: float = 300) -> float:
    start = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"gave up waiting {timeout:g} s for {what}")
        time.sleep(0.5)
    return time.monotonic() - start


def answers(path: str) -> bool:
    try:
        return httpx.get(BASE + path, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


# -- a user of the stack -------------------------------------------------------------------


def client() -> httpx.Client:
    """A new user, signed up through the proxy (the stack is started allowing many sign-ups
    from one address: ``PARLEY_SIGNUP_CHALLENGE_AFTER``)."""
    c = httpx.Client(base_url=BASE, timeout=60)
    email = f"stack-{time.monotonic_ns()}@example.com"
    r = c.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    c.cookies.clear()
    c.headers["Authorization"] = f"Bearer {r.json()['token']}"
    return c


def new_chat(c: httpx.Client) -> str:
    chat_id: str = c.post("/api/chats", json={"title": "stack"}).json()["id"]
    return chat_id


def events(response: httpx.Response) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def send(c: httpx.Client, chat: str, text: str, max_tokens: int = 200) -> dict[str, Any]:
    r = c.post(
        f"/api/chats/{chat}/messages",
        json={"content": text, "max_tokens": max_tokens},
        headers={"Accept": "application/json"},
    )
    assert r.status_code == 202, r.text
    sent: dict[str, Any] = r.json()
    return sent


def run_of(c: httpx.Client, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = c.get(f"/api/runs/{run_id}").json()
    return found


def ended(c: httpx.Client, run_id: str, timeout: float = 180) -> dict[str, Any]:
    terminal = {"completed", "cancelled", "failed", "rejected"}
    wait(f"run {run_id} to end", lambda: run_of(c, run_id)["status"] in terminal, timeout)
    return run_of(c, run_id)


Seen = list[tuple[str, str, dict[str, Any]]]


def follow(c: httpx.Client, run_id: str, seen: Seen, hints: list[dict[str, Any]]) -> None:
    """Read the run's stream to its end, resuming by Last-Event-ID after each drop; an
    ``error`` without an id (``server_restarting``: the api is being stopped) is kept in
    ``hints``, and its ``retry_after`` waited before resuming."""
    while not seen or seen[-1][1] != "done":
        last = seen[-1][0] if seen else None
        headers = {"Last-Event-ID": last} if last else {}
        try:
            with c.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as r:
                if r.status_code != 200:
                    time.sleep(0.5)
                    continue
                for event_id, kind, data in events(r):
                    if event_id:
                        seen.append((event_id, kind, data))
                    elif kind == "error":
                        hints.append(data)
                        time.sleep(float(data.get("retry_after") or 0))
        except httpx.HTTPError:
            time.sleep(0.3)  # the api went away mid-stream: resume on the other one


# -- the steps -----------------------------------------------------------------------------


def up() -> None:
    say("compose up")
    start = time.monotonic()
    many = {"PARLEY_SIGNUP_CHALLENGE_AFTER": "1000", "PARLEY_SIGNUP_FREE_ATTEMPTS": "1000"}
    env = {**os.environ, "COMPOSE": COMPOSE[0], **many}
    subprocess.run([str(ROOT / "deploy/compose/up.sh")], env=env, check=True)
    report["up_to_ready_seconds"] = round(time.monotonic() - start, 1)
    say(f"ready in {report['up_to_ready_seconds']} s")


def streamed_answer() -> None:
    c = client()
    chat = new_chat(c)
    with c.stream(
        "POST", f"/api/chats/{chat}/messages", json={"content": "Name three rivers."}
    ) as r:
        assert r.status_code == 200, r.read()
        got = list(events(r))
    deltas = [d for _, kind, d in got if kind == "delta"]
    assert len(deltas) > 3 and got[-1][1] == "done" and got[-1][2]["status"] == "completed", got
    report["streamed"] = {"deltas": len(deltas), "text": "".join(d["text"] for d in deltas)[:80]}
    say(f"streamed {len(deltas)} deltas")


def worker_killed_mid_answer() -> None:
    c = client()
    sent = send(c, new_chat(c), "Write a long story about a heron.", max_tokens=400)
    run_id = sent["run_id"]
    wait("the answer to start", lambda: run_of(c, run_id)["status"] == "running", 120)
    assert run_id.replace("_", "").isalnum()  # (an id: nothing to quote)
    host = psql(f"SELECT worker_id FROM runs WHERE id = '{run_id}'").split(":")[0]  # noqa: S608
    say(f"killing {host} mid-answer")
    run("podman", "kill", container(host))
    end = ended(c, run_id, timeout=240)
    report["worker_killed"] = {"worker": host, "run_status": end["status"]}
    say(f"the run ended {end['status']}")
    run(*COMPOSE, "start", host)  # (compose's restart policy may have done it already)


def secret(name: str) -> str:
    """A secret of deploy/.env (`make deploy/.env` writes random ones)."""
    for line in (ROOT / "deploy/.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == name:
            return value
    raise KeyError(name)


def psql(query: str) -> str:
    out = run(
        "podman",
        "exec",
        "-e",
        f"PGPASSWORD={secret('POSTGRES_PASSWORD')}",
        container("postgres"),
        "psql",
        "-h",
        "127.0.0.1",
        "-U",
        "parley",
        "-d",
        "parley",
        "-tAc",
        query,
    )
    return out.strip()


def redis_restarted() -> None:
    c = client()
    chat = new_chat(c)
    statuses: list[int] = []
    run("podman", "stop", "-t", "5", container("redis"))
    for _ in range(6):
        statuses.append(post(c, chat).status_code)
        time.sleep(0.5)
    run("podman", "start", container("redis"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = post(c, chat)
        statuses.append(r.status_code)
        if r.status_code == 202:
            ended(c, r.json()["run_id"])
            break
        time.sleep(1)
    report["redis_restart_statuses"] = statuses
    assert 503 in statuses and statuses[-1] == 202, statuses
    assert not [s for s in statuses if s >= 500 and s != 503], statuses
    say(f"sends across a Redis restart: {statuses}")
    # and what is sent after it is answered: no connection the restart left behind fails it
    ends = [ended(c, send(c, chat, f"Say {n}.", max_tokens=16)["run_id"]) for n in range(4)]
    report["runs_after_redis_restart"] = [e["status"] for e in ends]
    assert all(e["status"] == "completed" for e in ends), report["runs_after_redis_restart"]


def post(c: httpx.Client, chat: str) -> httpx.Response:
    r = c.post(
        f"/api/chats/{chat}/messages",
        json={"content": "hello", "max_tokens": 8},
        headers={"Accept": "application/json"},
    )
    if r.status_code == 503:
        assert r.headers.get("Retry-After"), r.headers
    return r


def api_rolled_while_streaming() -> None:
    c = client()
    chat = new_chat(c)
    sent = send(c, chat, "Write a long story about a river.", max_tokens=500)
    seen: Seen = []
    hints: list[dict[str, Any]] = []
    reader = threading.Thread(target=follow, args=(c, sent["run_id"], seen, hints), daemon=True)
    reader.start()
    for api in ("api1", "api2"):
        wait("more of the answer", more_than(seen, len(seen) + 3), 120)
        say(f"rolling {api} while the client streams")
        start = time.monotonic()
        run("podman", "stop", "-t", "15", container(api))
        run("podman", "start", container(api))
        ready = wait(f"{api} to be ready", ready_check(api), 240)
        report.setdefault("api_restart_seconds", {})[api] = round(time.monotonic() - start, 1)
        report.setdefault("api_ready_after_start_seconds", {})[api] = round(ready, 1)
    reader.join(240)
    ids = [event_id for event_id, _, _ in seen]
    assert len(ids) == len(set(ids)), "an event came twice"
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-"))), "out of order"
    text = "".join(d["text"] for _, kind, d in seen if kind == "delta")
    stored = c.get(f"/api/chats/{chat}/messages").json()["data"]
    assert stored[0]["content"] == text, "the streamed text is not the stored answer"
    # the stream was on one of the two when it was stopped: told to resume, not cut
    assert any(h.get("code") == "server_restarting" for h in hints), hints
    report["rolled_stream"] = {"events": len(ids), "chars": len(text), "hints": hints}
    say(f"the stream resumed across both restarts: {len(ids)} events, each once")


def more_than(seen: list[Any], n: int) -> Callable[[], bool]:
    return lambda: len(seen) > n


def ready_check(service: str) -> Callable[[], bool]:
    return lambda: container_ready(service)


def container_ready(service: str) -> bool:
    probe = "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"
    done = subprocess.run(
        ["podman", "exec", container(service), "python3", "-c", probe],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def memory(label: str) -> None:
    rows = json.loads(run("podman", "stats", "--no-stream", "--format", "json"))
    report.setdefault("memory_mib", {})[label] = {
        r["name"].removeprefix("parley_").removesuffix("_1"): mib(r) for r in rows
    }


def mib(row: dict[str, Any]) -> int:
    """A row of `podman stats`' memory in MiB (its ``mem_usage``: "152.1MB / 25.18GB")."""
    if "mem_usage_bytes" in row:
        return round(int(row["mem_usage_bytes"]) / 2**20)
    used = str(row.get("mem_usage", "0B")).split("/")[0].strip()
    units = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "B": 1}
    for unit, size in units.items():
        if used.endswith(unit):
            return round(float(used[: -len(unit)]) * size / 2**20)
    return 0


def under_load(streams: int = 50) -> None:
    users = [client() for _ in range(streams)]  # one each: a free user runs one at a time
    done: list[str] = []

    def one(i: int) -> None:
        c = users[i % len(users)]
        chat = new_chat(c)
        with c.stream(
            "POST",
            f"/api/chats/{chat}/messages",
            json={"content": f"Tell me about river {i}.", "max_tokens": 64},
        ) as r:
            last = [kind for _, kind, _ in events(r)][-1:] if r.status_code == 200 else []
        done.append(last[0] if last else str(r.status_code))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    time.sleep(8)
    memory(f"{streams} streams")
    for t in threads:
        t.join(300)
    report["load"] = {"streams": streams, "ends": {k: done.count(k) for k in set(done)}}
    say(f"{streams} streams: {report['load']['ends']}")
    assert done.count("done") == streams, report["load"]


def measure_image() -> None:
    size = int(run("podman", "image", "inspect", IMAGE, "--format", "{{.Size}}").strip())
    report["image_mib"] = round(size / 2**20)


def down() -> None:
    say("compose down")
    run(*COMPOSE, "down", "--volumes", check=False)


def main() -> int:
    if shutil.which("podman") is None:
        print("stack test skipped: podman is not installed")
        return 0
    measure_image()
    down()  # (a stack left over from an earlier run)
    try:
        up()
        memory("idle")
        streamed_answer()
        worker_killed_mid_answer()
        redis_restarted()
        api_rolled_while_streaming()
        under_load()
        stuck = psql("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')")
        report["runs_in_progress_at_the_end"] = int(stuck)
        wait(
            "no run in progress",
            lambda: psql("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')") == "0",
            120,
        )
    except Exception as e:
        report["failure"] = repr(e)
        run(
            "sh",
            "-c",
            f"{' '.join(COMPOSE)} logs --tail 40 > build/stack-test.log 2>&1",
            check=False,
        )
        raise
    finally:
        print(json.dumps(report, indent=1))
        down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
