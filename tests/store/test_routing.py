"""Where lag-tolerant reads go (``store/routing.py``), on the real Postgres: the "replica" here
is the same server reached through the replica pool (its own application_name, read-only),
so a test can tell which pool served a read. A user who has not written reads from the
replica; one who just wrote (an unsafe request, or a run of theirs that ended) reads from
the primary until the window lapses; no replica, an unreachable replica or unreadable marks
all read from the primary, without an error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from parley.api.app import create_app
from parley.bus.memory import MemoryBus
from parley.config import load_settings
from parley.domain import RunStatus
from parley.runs.finisher import Guard
from parley.services import Services
from parley.store.database import Database
from parley.store.routing import Reads
from parley.store.run_ends import Outcome
from tests.builders import BACKENDS, ROOMY_TIERS, services_for, truncate
from tests.helpers import user_headers
from tests.processes import free_port
from tests.runs.helpers import new_chat, send_json
from tests.waiting import eventually

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS, reason="replicas are Postgres")

WINDOW = 2.0  # long enough for three requests on a loaded CI machine (0.5 s was not)


async def pool_of(reads: Reads, user_id: str) -> str:
    async with reads.session(user_id) as s:
        name: str = await s.scalar(text("SELECT current_setting('application_name')"))
    return name.removeprefix("parley-")


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[Database]:
    database = Database(postgres_url, replica_url=postgres_url)
    yield database
    await database.dispose()


async def test_reads_go_to_the_replica_except_for_a_user_who_just_wrote(db: Database) -> None:
    reads = Reads(db, MemoryBus(), window=WINDOW)
    assert await pool_of(reads, "ada") == "replica"
    await reads.wrote("ada")
    assert await pool_of(reads, "ada") == "primary"
    assert await pool_of(reads, "bob") == "replica"  # marks are per user
    assert reads.served == {"replica": 2, "primary": 1}

    async def back_on_the_replica() -> bool:
        return await pool_of(reads, "ada") == "replica"

    await eventually(back_on_the_replica, "ada's reads back on the replica", timeout=5)


async def test_without_a_replica_every_read_is_the_primarys(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        reads = Reads(db, MemoryBus(), window=WINDOW)
        await reads.wrote("ada")  # nothing to mark: no replica
        assert not await MemoryBus().wrote_recently("ada")
        assert [await pool_of(reads, u) for u in ("ada", "bob")] == ["primary", "primary"]
    finally:
        await db.dispose()


async def test_an_unreachable_replica_sends_reads_to_the_primary(postgres_url: str) -> None:
    url = make_url(postgres_url)
    dead = f"postgresql://{url.username}@127.0.0.1:{free_port()}/{url.database}"
    db = Database(postgres_url, replica_url=dead, connect_timeout=2)
    try:
        reads = Reads(db, MemoryBus(), window=WINDOW)
        assert await pool_of(reads, "ada") == "primary"
        assert reads.served == {"replica": 0, "primary": 1}
    finally:
        await db.dispose()


class BrokenMarks:
    async def mark_write(self, user_id: str, *, ttl: float) -> None:
        raise ConnectionError("the bus is down")

    async def wrote_recently(self, user_id: str) -> bool:
        raise ConnectionError("the bus is down")


async def test_marks_that_cannot_be_read_send_reads_to_the_primary(db: Database) -> None:
    reads = Reads(db, BrokenMarks(), window=WINDOW)
    await reads.wrote("ada")  # logged, not raised: the write goes on
    assert await pool_of(reads, "ada") == "primary"


@pytest.fixture
async def replicated(postgres_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    await truncate(postgres_url)
    settings = load_settings(
        database_url=postgres_url,
        database_replica_url=postgres_url,
        read_your_writes_seconds=WINDOW,
        data_dir=tmp_path,
        engine="fake",
        tiers=ROOMY_TIERS,
    )
    svc = services_for(settings)
    yield svc
    await svc.close()


async def test_the_api_reads_history_from_the_replica_unless_the_user_just_wrote(
    replicated: Services,
) -> None:
    transport = httpx.ASGITransport(app=create_app(replicated, close_services=False))
    reads = replicated.reads
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as client:
        auth = await user_headers(client, "ada@example.com")
        chat_id = await new_chat(client, auth)  # a POST: ada's reads stay on the primary
        sent = await send_json(client, auth, chat_id)
        history = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
        assert history.status_code == 200 and len(history.json()["data"]) == 2
        assert (await client.get("/api/chats", headers=auth)).json()["data"][0]["id"] == chat_id
        assert reads.served == {"replica": 0, "primary": 2}

        async def lapsed() -> bool:
            return not await replicated.bus.wrote_recently(await _user_id(client, auth))

        await eventually(lapsed, "ada's write mark to lapse", timeout=10)
        assert (await client.get(f"/api/chats/{chat_id}", headers=auth)).status_code == 200
        assert (await client.get("/api/chats", headers=auth)).status_code == 200
        assert reads.served == {"replica": 2, "primary": 2}

        # a run of ada's that ends (here: the finisher ending it while queued) marks her
        ended = Outcome(status=RunStatus.CANCELLED)
        assert await replicated.finisher.finish(sent["run_id"], ended, Guard(RunStatus.QUEUED))
        messages = await client.get(f"/api/chats/{chat_id}/messages", headers=auth)
        assert messages.json()["data"][0]["status"] == "cancelled"
        assert reads.served == {"replica": 2, "primary": 3}


async def _user_id(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    me = await client.get("/api/me", headers=auth)
    user_id: str = me.json()["user"]["id"]
    return user_id
