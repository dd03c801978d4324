"""What a process serving models says of its engines, for the admin console's models panel:
each model's engine state, slots, batch and KV cache, and a fleet's replicas (healthy, in
flight, served), written to the database every ``interval`` seconds (``store/
engine_reports.py``) so an api process that holds no engine can show every worker's."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from parley.engines.interface import Engine
from parley.engines.stats import engine_stats, engines_by_model
from parley.store import engine_reports
from parley.store.database import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    label: str
    url: str
    healthy: bool
    in_flight: int
    served: int
    slots: int


@dataclass(frozen=True, slots=True)
class ModelReport:
    model: str
    state: str
    batch_sequences: int = 0
    kv_blocks_used: int = 0
    kv_blocks: int = 0
    replicas: list[ReplicaReport] = field(default_factory=list)


def report(engine: Engine, models: list[str]) -> list[ModelReport]:
    found = []
    for model, one in engines_by_model(engine, models).items():
        stats = engine_stats(one)
        states = getattr(one, "states", None)
        replicas = [
            ReplicaReport(r.label, r.base_url, r.healthy, r.in_flight, r.served, r.slots)
            for r in (states() if states is not None else [])
        ]
        found.append(
            ModelReport(
                model,
                one.state().value,
                stats.batch_sequences,
                stats.kv_blocks_used,
                stats.kv_blocks,
                replicas,
            )
        )
    return found


class Named(Protocol):
    worker_id: str


def reporter(
    db: Database, worker: Named | None, engine: Engine, models: list[str], interval: float
) -> Callable[[], Coroutine[Any, Any, None]]:
    """``publish_forever``'s task, named for the worker (else this host and process)."""
    me = worker.worker_id if worker else f"{socket.gethostname()}:{os.getpid()}"
    return lambda: publish_forever(db, me, engine, models, interval)


async def publish_forever(
    db: Database, worker_id: str, engine: Engine, models: list[str], interval: float
) -> None:
    """Write this process's report every ``interval`` seconds; a failed write is logged and
    tried again (the database may be down a while), the row removed on the way out."""
    try:
        while True:
            try:
                rows = [asdict(m) for m in report(engine, models)]
                async with db.transaction() as s:
                    await engine_reports.put(s, worker_id, rows)
            except Exception:
                log.exception("engine reports: writing this process's report failed")
            await asyncio.sleep(interval)
    finally:
        try:
            async with db.transaction() as s:
                await engine_reports.remove(s, worker_id)
        except Exception:
            log.warning("engine reports: this process's report was left behind")
