"""parley's split stack on a real pg_auto_failover formation (Debian's packages: a monitor and
two Postgres nodes on this machine), failed over twice under steady load.

Two ``parley api`` processes and a ``parley worker`` are given every node, the libpq way
(``database_url`` with ``target_session_attrs=read-write``, ``database_replica_url`` with
``prefer-standby``). Users stream answers, send messages, read their history, and a probe
sends a short message every 0.1 s (``tests/faults/load.py``) while ``pg_autoctl perform
failover`` moves the primary to the other node, and back. All along, some sends have their
response dropped after the server answered (the client sends again with the same
Idempotency-Key) and some streams are cut by the client and resumed from their last event id
on the other api process. Asserted:

* no answer was a 500 (or any 5xx but 503), and nothing but 2xx and 503 was answered;
* every message the API accepted (2xx) is stored exactly once, and no message twice, the
  ones whose response was dropped included;
* every accepted run ended ``completed`` (none failed, none left queued or running), and no
  stream carried an error event: an answer generated through a failover is stored once the
  database is back;
* every streamed answer's text, cut and resumed or not, is the stored answer;
* writes resumed within ``WRITE_WINDOW_BOUND`` seconds of each failover (the longest gap
  between the probe's accepted sends; measured here at about 1-4 s on a shared 2-core
  machine: docs/FAILOVER.md);
* lag-tolerant reads are served by the standby (the replica pool's connections are there).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.builders import REDIS_URL
from tests.faults import pgaf
from tests.faults.load import LOAD_TIERS, Load, Record, check_stored
from tests.processes import Cluster, cluster_env
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

log = logging.getLogger(__name__)

WRITE_WINDOW_BOUND = 15.0  # seconds: what a failover may cost writes, at most
STEADY_SECONDS = 4.0  # load before, between and after the failovers


@pytest.fixture(scope="module")
def formation() -> Iterator[pgaf.Formation]:
    reason = pgaf.unavailable()
    if reason is not None:
        pytest.skip(f"pg_auto_failover cannot run here: {reason}")
    f = pgaf.Formation()
    try:
        f.start()
        yield f
    finally:
        f.stop()


@pytest.fixture
def cluster(formation: pgaf.Formation, tmp_path: Path) -> Iterator[Cluster]:
    env = cluster_env(
        formation.primary_url,
        REDIS_URL,
        PARLEY_DATABASE_REPLICA_URL=formation.replica_url,
        PARLEY_DATABASE_CONNECT_TIMEOUT_SECONDS="2",
        PARLEY_READ_YOUR_WRITES_SECONDS="1",  # readers seeded their history just before
        PARLEY_LEASE_SECONDS="5",
        PARLEY_TIERS=json.dumps(LOAD_TIERS),
        PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS="20",
        PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS="30",
        PARLEY_FAKE_ENGINE__OUTPUT_TOKENS="30",
        PARLEY_FAKE_ENGINE__SLOTS="16",
    )
    cluster = Cluster(env, tmp_path)
    try:
        yield cluster
    finally:
        for proc in cluster.procs:
            proc.stop()


async def test_two_failovers_under_load_lose_nothing_and_answer_no_500(
    formation: pgaf.Formation, cluster: Cluster
) -> None:
    _, first = await asyncio.to_thread(cluster.api)
    _, second = await asyncio.to_thread(cluster.api)
    await asyncio.to_thread(cluster.worker)
    load = Load([first, second], streamers=2, senders=2, readers=2)
    await load.prepare()
    load.start()
    windows = []
    try:
        await asyncio.sleep(STEADY_SECONDS)
        await _reads_reach_the_standby(formation)
        for _ in range(2):
            before = await asyncio.to_thread(formation.primary)
            started = time.monotonic()
            settled = await asyncio.to_thread(formation.failover)
            assert await asyncio.to_thread(formation.primary) != before
            await asyncio.sleep(STEADY_SECONDS)
            windows.append((load.record.probe_gaps(started, started + settled), settled))
    finally:
        await load.stop()
    record = load.record
    stored = await check_stored(formation.primary_url, record)
    log.warning(
        "failovers (write window s, settled s): %s; answers %s; runs %s; stream errors %s; "
        "dropped %d, cut %d, resumes %d",
        windows,
        record.status_mix(),
        stored.runs,
        dict(record.stream_errors),
        len(record.dropped),
        record.cuts,
        record.resumes,
    )
    _no_server_error(record)
    assert not stored.problems(), stored.problems()
    for window, _ in windows:
        assert window <= WRITE_WINDOW_BOUND, (windows, record.status_mix())


def _no_server_error(record: Record) -> None:
    assert not record.server_errors, record.server_errors[:5]
    assert not record.unexpected, record.unexpected[:5]
    statuses = {status for _, status in record.statuses}
    assert statuses <= {200, 201, 202, 503}, record.status_mix()
    assert not record.unfinished, record.unfinished
    dropped = {k: n for k, n in record.transport_errors.items() if k.endswith(" ReadError")}
    assert sum(dropped.values()) == len(record.dropped), (dropped, len(record.dropped))
    others = {k: n for k, n in record.transport_errors.items() if k not in dropped}
    assert not others, record.transport_errors
    assert not record.stream_errors, record.stream_errors
    assert len(record.dropped) >= 6 and record.cuts >= 3, (len(record.dropped), record.cuts)
    assert record.statuses[("probe", 202)] > 20  # the load ran all along
    assert len(record.streamed) >= 4 and len(record.reads) > 50


async def _reads_reach_the_standby(formation: pgaf.Formation) -> None:
    """The replica pool's connections (lag-tolerant reads) are on the standby."""
    standby = next(s.name for s in formation.states() if s.reported == "secondary")
    url = formation.node_url(standby).replace("postgresql://", "postgresql+asyncpg://")
    engine = create_async_engine(url)
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'parley-replica'"
    try:

        async def connected() -> bool:
            async with engine.connect() as conn:
                return bool(await conn.scalar(text(query)))

        await eventually(connected, f"replica reads on the standby {standby}", timeout=10)
    finally:
        await engine.dispose()
