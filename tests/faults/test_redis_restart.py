"""Redis restarted without persistence (its default here, and the documented choice): every
key is gone at once — the run queue, the run streams and their fences, budgets, slots — and so
are the Lua scripts it had loaded. The service must not lose a run or a message to it: runs
that were queued are queued again from the database, a run being generated ends by the
documented rule with its text kept, clients resuming get what the database holds, and new
sends work without a restart of any process.

The Redis here is a server of the test's own (``redis-server`` on a free port, nothing on
disk), killed with SIGKILL and started again on its port: a real restart, not keys deleted.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis

from parley.config import Settings
from tests.builders import BACKENDS
from tests.faults.helpers import (
    RECOVERY_SECONDS,
    no_run_left_open,
    resume,
    send_streamed,
)
from tests.faults.proxy import FaultProxy
from tests.helpers import user_headers
from tests.processes import free_port
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.sse import events, text_of
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS, reason="the split stack's faults")


@pytest.fixture
def one_slot(split_settings: Settings) -> None:
    """One answer at a time, each 40 tokens at 40 ms: a second send waits in the queue."""
    split_settings.engines.fake.slots = 1
    split_settings.engines.fake.output_tokens = 40
    split_settings.engines.fake.inter_token_latency_ms = 40
    split_settings.runs.requeue_stale_after_seconds = 1.5


class RedisServer:
    """A ``redis-server`` of the test's own on ``port``, keeping nothing on disk."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.directory)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def ready(self) -> None:
        r = redis.Redis.from_url(self.url)
        try:
            for _ in range(100):
                try:
                    await r.ping()
                    return
                except redis.ConnectionError:
                    await asyncio.sleep(0.1)
            raise AssertionError(f"redis-server on {self.port} did not start")
        finally:
            await r.aclose()

    async def keys(self) -> int:
        r = redis.Redis.from_url(self.url)
        try:
            return int(await r.dbsize())
        finally:
            await r.aclose()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    async def restart(self) -> None:
        """SIGKILL, then a new server on the same port: every key and script gone."""
        self.kill()
        self.start()
        await self.ready()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
async def redis_proxy(own_redis: RedisServer) -> AsyncIterator[FaultProxy]:
    """The bus reaches the test's own Redis (through the proxy, as the fault suite does)."""
    await own_redis.ready()
    proxy = await FaultProxy("127.0.0.1", own_redis.port).start()
    yield proxy
    await proxy.close()


async def test_a_redis_restart_that_loses_every_key_loses_no_run_and_no_message(
    one_slot: None,
    client: httpx.AsyncClient,
    redis_proxy: FaultProxy,
    own_redis: RedisServer,
    postgres_url: str,
) -> None:
    auth = await user_headers(client, "ada@example.com")
    first_chat, second_chat = await new_chat(client, auth), await new_chat(client, auth)
    queued: dict[str, Any] = {}
    lost: list[int] = []

    async def restart() -> None:
        queued.update(await send_json(client, auth, second_chat))  # waits for the one slot
        lost.append(await own_redis.keys())
        redis_proxy.cut()
        await own_redis.restart()
        assert await own_redis.keys() == 0
        redis_proxy.restore()

    restarting: list[asyncio.Task[None]] = []
    seen = await send_streamed(
        client,
        auth,
        first_chat,
        at_third_delta=lambda: restarting.append(asyncio.create_task(restart())),
    )
    await restarting[0]
    assert lost[0] > 0  # the queue, the streams, the slots were there, and are gone
    run_id = seen[0].data["run_id"]

    # the streamed run: whatever its client saw last, resuming from its last id ends with
    # the stored message's text and status
    ids = [e.id for e in seen if e.id is not None]
    rest = await resume(client, auth, run_id, ids[-1]) if seen[-1].event != "done" else []
    everything = seen + rest
    done = everything[-1]
    assert done.event == "done", [e.event for e in everything]
    run = await wait_run(client, auth, run_id, timeout=RECOVERY_SECONDS)
    assert run["status"] == done.data["status"] and run["status"] in ("completed", "failed")
    stored = await answers(client, auth, first_chat)
    assert len(stored) == 1 and stored[0]["status"] == run["status"]
    assert text_of(everything) == stored[0]["content"] and stored[0]["content"]

    # the queued run was put back on the (empty) queue from the database and answered once
    second = await wait_run(client, auth, queued["run_id"], timeout=RECOVERY_SECONDS)
    assert second["status"] == "completed", second
    stored = await answers(client, auth, second_chat)
    assert len(stored) == 1 and stored[0]["content"]
    # read from the start, its stream (recreated after the restart) agrees with the store
    async with client.stream("GET", f"/api/runs/{queued['run_id']}/events", headers=auth) as r:
        replay = [e async for e in events(r)]
    assert text_of(replay) == stored[0]["content"]

    await recovered_after_restart(client, auth, first_chat)
    assert (await client.get("/readyz")).status_code == 200
    me = (await client.get("/api/me", headers=auth)).json()
    assert me["budget"] is not None  # a fresh bucket: spending before the restart forgiven
    await no_run_left_open(postgres_url)


async def recovered_after_restart(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str
) -> None:
    """Sends go through again and complete, with no process restarted. One run may yet end
    ``failed`` with ``dependency_unavailable``: its worker met a connection the restart had
    killed, before the pool let go of it (seen once in CI; noted for a follow-up: health-
    checked connections). Its text is kept, the run is not left open, and the next completes."""
    cut = 0
    while True:

        async def accepted() -> dict[str, Any] | None:
            return await send_json_or_503(client, auth, chat_id)

        sent = await eventually(accepted, "a send accepted again", timeout=RECOVERY_SECONDS)
        run = await wait_run(client, auth, sent["run_id"], timeout=RECOVERY_SECONDS)
        if run["status"] == "completed":
            return
        assert run["error"]["code"] == "dependency_unavailable" and cut == 0, run
        cut += 1


async def send_json_or_503(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str
) -> dict[str, Any] | None:
    r = await client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hello again"},
        headers={**auth, "Accept": "application/json"},
    )
    if r.status_code == 503:
        return None
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


async def answers(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str
) -> list[dict[str, Any]]:
    r = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
    return [m for m in r.json()["data"] if m["role"] == "assistant"]
