"""What an engine reports of its own load: batch, KV cache, prefix cache, replicas.

Read on demand (a scrape, the engine server's ``/health``, a sampler), never pushed: the
engines know nothing of who reads them. Reading is safe from the asyncio thread while the
built-in engine's loop thread steps (plain integers and list lengths).
"""

from __future__ import annotations

from dataclasses import dataclass

from parley.engines.catalog import Catalog
from parley.engines.fake import FakeEngine
from parley.engines.interface import Engine


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One engine now. Prefix-cache figures count prompt tokens since the engine started."""

    batch_sequences: int = 0  # sequences in the engine's current batch (0 when idle)
    batch_tokens: int = 0  # tokens in it (prefill chunks and decodes)
    kv_blocks_used: int = 0
    kv_blocks: int = 0  # 0: the engine has no KV cache of its own
    prefix_queries: int = 0
    prefix_hits: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """One upstream replica, as this process's router sees it."""

    label: str
    healthy: bool
    in_flight: int


def engines_by_model(engine: Engine, models: list[str]) -> dict[str, Engine]:
    """Each served model's own engine: a catalog's, else the one engine of the first model."""
    if isinstance(engine, Catalog):
        return dict(engine.engines)
    return {models[0]: engine} if models else {}


def engine_stats(engine: Engine) -> EngineStats:
    """The built-in engine's step and caches; the fake engine's busy slots; zeros otherwise."""
    if isinstance(engine, FakeEngine):
        return EngineStats(batch_sequences=engine.busy_slots)
    core = getattr(engine, "core", None)
    if core is None:
        return EngineStats()
    blocks = core.blocks
    step = core.last_step if core.scheduler.has_work else None
    return EngineStats(
        batch_sequences=step.batch_sequences if step is not None else 0,
        batch_tokens=step.batch_tokens if step is not None else 0,
        kv_blocks_used=blocks.num_blocks - blocks.num_free_blocks,
        kv_blocks=blocks.num_blocks,
        prefix_queries=int(blocks.queries),
        prefix_hits=int(blocks.hits),
    )


def replica_stats(engine: Engine) -> list[ReplicaStats]:
    """A router's replicas (healthy, in flight); none for any other engine."""
    states = getattr(engine, "states", None)
    if states is None:
        return []
    return [ReplicaStats(s.label, s.healthy, s.in_flight) for s in states()]
