"""Prometheus metrics: what parley counts, and the text ``/metrics`` answers with.

Nothing is made at import time. ``build_metrics(settings)``, called by the composition root
(``parley.services``), makes every metric; the services hand the ``Metrics`` to whoever
records: the finisher's end listener (runs by status, tokens, duration), the worker (time
to first token and inter-token latency, ``timed``), the relay (open streams, resumes), the
HTTP error mapping (admission refusals, ``refused``) and, in a process with an engine, a
sampler (batch size, KV cache, prefix cache, upstream replicas). The queue's depth is read
from the bus when scraped.

Processes. Without ``metrics_dir`` a process keeps its metrics in a registry of its own:
right for ``parley serve``, where api and worker are one process. With ``metrics_dir`` every
process of one host (``parley api``, ``parley worker``, ``serve``) writes its values to files
in that directory (prometheus_client's multiprocess mode) and ``/metrics`` of any of them
sums them all, so the api shows what its workers measured. prometheus_client chooses where
values live when it is first imported (``PROMETHEUS_MULTIPROC_DIR``); parley makes that
choice here, at start-up, from its settings (``_use_directory``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import values as prometheus_values
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from parley.bus.interface import Bus
from parley.domain import QUEUE_WAIT_EXCEEDED, utcnow
from parley.engines.interface import Engine
from parley.engines.registry import configured_models
from parley.engines.settings import EngineSettings
from parley.engines.stats import engine_stats, engines_by_model, replica_stats
from parley.observability.moderation import moderation_metrics
from parley.observability.settings import ObservabilitySettings
from parley.observability.token_timing import TokenTimer
from parley.qos.settings import QosSettings
from parley.store.schema import Run

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
UNKNOWN_TIER = "unknown"  # a refusal before anyone was authenticated (sign-up, log-in)

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60)
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2)
DURATION_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
QUEUE_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


@dataclass(frozen=True, slots=True)
class _RunMetrics:
    ttft: Histogram
    itl: Histogram
    duration: Histogram
    runs: Counter
    prompt_tokens: Counter
    completion_tokens: Counter
    admitted: Counter
    queue_wait: Histogram


@dataclass(frozen=True, slots=True)
class _EdgeMetrics:
    refusals: Counter
    downgraded: Counter
    open_streams: Gauge
    resumes: Counter
    feedback: Counter


@dataclass(frozen=True, slots=True)
class _EngineMetrics:
    batch_size: Gauge
    batch_tokens: Gauge
    kv_used: Gauge
    kv_blocks: Gauge
    prefix_queries: Counter
    prefix_hits: Counter
    replica_healthy: Gauge
    replica_in_flight: Gauge


def _run_metrics(reg: CollectorRegistry | None) -> _RunMetrics:
    by = ["model", "tier"]
    return _RunMetrics(
        ttft=Histogram(
            "parley_time_to_first_token_seconds",
            "From the run's submission (queue wait included) to its first token.",
            by,
            registry=reg,
            buckets=TTFT_BUCKETS,
        ),
        itl=Histogram(
            "parley_inter_token_latency_seconds",
            "Between a run's consecutive output tokens, as the worker receives them.",
            by,
            registry=reg,
            buckets=ITL_BUCKETS,
        ),
        duration=Histogram(
            "parley_run_duration_seconds",
            "From the run's submission to its end, by final status.",
            [*by, "status"],
            registry=reg,
            buckets=DURATION_BUCKETS,
        ),
        runs=Counter("parley_runs", "Runs ended, by final status.", [*by, "status"], registry=reg),
        prompt_tokens=Counter("parley_prompt_tokens", "Prompt tokens charged.", by, registry=reg),
        completion_tokens=Counter(
            "parley_completion_tokens", "Completion tokens generated.", by, registry=reg
        ),
        admitted=Counter("parley_runs_admitted", "Runs admitted (made).", by, registry=reg),
        queue_wait=Histogram(
            "parley_queue_wait_seconds",
            "From the run's submission to its start; a run rejected for waiting too long, "
            "to its rejection.",
            by,
            registry=reg,
            buckets=QUEUE_WAIT_BUCKETS,
        ),
    )


def _edge_metrics(reg: CollectorRegistry | None) -> _EdgeMetrics:
    return _EdgeMetrics(
        refusals=Counter(
            "parley_admission_refusals",
            "Requests refused for load or quota (429, 503), by the error code.",
            ["tier", "reason"],
            registry=reg,
        ),
        downgraded=Counter(
            "parley_runs_downgraded",
            "Runs served by their tier's downgrade model because the model asked for was busy.",
            ["tier", "requested_model", "model"],
            registry=reg,
        ),
        open_streams=Gauge(
            "parley_open_streams",
            "SSE streams open now.",
            registry=reg,
            multiprocess_mode="livesum",
        ),
        resumes=Counter(
            "parley_stream_resumes", "Streams opened with a Last-Event-ID.", registry=reg
        ),
        feedback=Counter(
            "parley_feedback",
            "Ratings users gave answers (each given or changed), by the answer's model.",
            ["model", "rating"],
            registry=reg,
        ),
    )


def _engine_metrics(reg: CollectorRegistry | None) -> _EngineMetrics:
    def gauge(name: str, doc: str, labels: list[str], mode: Any = "livesum") -> Gauge:
        return Gauge(name, doc, labels, registry=reg, multiprocess_mode=mode)

    model, replica = ["model"], ["model", "replica"]
    return _EngineMetrics(
        batch_size=gauge("parley_engine_batch_size", "Sequences in the engine's batch.", model),
        batch_tokens=gauge("parley_engine_batch_tokens", "Tokens in the engine's step.", model),
        kv_used=gauge("parley_engine_kv_cache_used_blocks", "KV cache blocks in use.", model),
        kv_blocks=gauge("parley_engine_kv_cache_blocks", "KV cache blocks in all.", model),
        prefix_queries=Counter(
            "parley_engine_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            model,
            registry=reg,
        ),
        prefix_hits=Counter(
            "parley_engine_prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            model,
            registry=reg,
        ),
        replica_healthy=gauge(
            "parley_upstream_replica_healthy",
            "1 while routed to (every worker agrees).",
            replica,
            "livemin",
        ),
        replica_in_flight=gauge(
            "parley_upstream_replica_in_flight", "Requests at the replica now.", replica
        ),
    )


class _QueueDepth:
    """``parley_queue_depth{priority}``: what the bus said when last asked (every scrape)."""

    def __init__(self, priorities: Iterable[int]) -> None:
        self._bands = sorted(set(priorities))
        self.depth: dict[int, int] = {}

    async def refresh(self, bus: Bus) -> None:
        try:
            depth = await bus.queue_depth()
        except Exception as e:  # a scrape still answers; the gap shows on the dashboard
            log.warning("metrics: the queue depth could not be read: %r", e)
            self.depth = {}
            return
        self.depth = {**dict.fromkeys(self._bands, 0), **depth}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "parley_queue_depth",
            "Runs waiting in the queue, by priority band.",
            labels=["priority"],
        )
        for priority, count in sorted(self.depth.items()):
            family.add_metric([str(priority)], count)
        yield family


class Metrics:
    """Every metric of one process, and its exposition."""

    def __init__(self, engines: EngineSettings, qos: QosSettings, directory: Path | None) -> None:
        self.directory = directory
        own = CollectorRegistry() if directory is None else None
        self._runs = _run_metrics(own)
        self._edge = _edge_metrics(own)
        self._engine = _engine_metrics(own)
        self.moderation = moderation_metrics(own)  # recorded by the safety.Moderator
        self._models = configured_models(engines)
        self._prefix_seen: dict[str, tuple[int, int]] = {}
        self._queue = _QueueDepth(t.priority for t in qos.tiers.values())
        self._scrape = own or CollectorRegistry()
        if directory is not None:
            MultiProcessCollector(self._scrape, path=str(directory))  # type: ignore[no-untyped-call]
        self._scrape.register(self._queue)

    # -- recording

    def run_admitted(self, run: Run) -> None:
        self._runs.admitted.labels(run.model, run.tier).inc()

    def feedback_given(self, model: str | None, rating: str) -> None:
        self._edge.feedback.labels(model or "", rating).inc()

    def run_downgraded(self, tier: str, requested: str, model: str) -> None:
        self._edge.downgraded.labels(tier, requested, model).inc()

    def run_started(self, run: Run) -> None:
        """The run's wait in the queue, as it starts (no wait for one handed off at birth)."""
        started = run.started_at or utcnow()
        wait = max(0.0, (started - run.created_at).total_seconds())
        self._runs.queue_wait.labels(run.model, run.tier).observe(wait)

    def run_ended(self, run: Run) -> None:
        """The finisher's end listener: the run by status, its tokens and its duration."""
        labels = (run.model, run.tier)
        if run.error_code == QUEUE_WAIT_EXCEEDED and run.finished_at is not None:
            wait = (run.finished_at - run.created_at).total_seconds()
            self._runs.queue_wait.labels(*labels).observe(max(0.0, wait))
        self._runs.runs.labels(*labels, run.status.value).inc()
        self._runs.prompt_tokens.labels(*labels).inc(run.prompt_tokens or 0)
        self._runs.completion_tokens.labels(*labels).inc(run.completion_tokens or 0)
        ended = run.finished_at or utcnow()
        seconds = max(0.0, (ended - run.created_at).total_seconds())
        self._runs.duration.labels(*labels, run.status.value).observe(seconds)

    def token_timer(self, run: Run) -> TokenTimer:
        """What times a run's tokens as they come (``see`` with each delta, in the worker's
        own loop; ``close`` at its stream's end): ``token_timing.py``."""
        by = (run.model, run.tier)
        return TokenTimer(self._runs.ttft.labels(*by), self._runs.itl.labels(*by), run.created_at)

    def refused(self, tier: str | None, reason: str) -> None:
        self._edge.refusals.labels(tier or UNKNOWN_TIER, reason).inc()

    def stream_opened(self, *, resumed: bool) -> None:
        self._edge.open_streams.inc()
        if resumed:
            self._edge.resumes.inc()

    def stream_closed(self) -> None:
        self._edge.open_streams.dec()

    # -- sampling an engine

    def sample(self, engine: Engine) -> None:
        """Read the engine's load and caches into the engine metrics."""
        m = self._engine
        for model, one in engines_by_model(engine, self._models).items():
            stats = engine_stats(one)
            m.batch_size.labels(model).set(stats.batch_sequences)
            m.batch_tokens.labels(model).set(stats.batch_tokens)
            m.kv_used.labels(model).set(stats.kv_blocks_used)
            m.kv_blocks.labels(model).set(stats.kv_blocks)
            queries, hits = self._prefix_seen.get(model, (0, 0))
            m.prefix_queries.labels(model).inc(_grown(queries, stats.prefix_queries))
            m.prefix_hits.labels(model).inc(_grown(hits, stats.prefix_hits))
            self._prefix_seen[model] = (stats.prefix_queries, stats.prefix_hits)
            for replica in replica_stats(one):
                m.replica_healthy.labels(model, replica.label).set(int(replica.healthy))
                m.replica_in_flight.labels(model, replica.label).set(replica.in_flight)

    async def sample_forever(self, engine: Engine, interval: float) -> None:
        """Sample the engine every ``interval`` seconds (other processes read the files)."""
        while True:
            try:
                self.sample(engine)
            except Exception:
                log.exception("metrics: sampling the engine failed")
            await asyncio.sleep(interval)

    # -- exposition

    async def exposition(self, bus: Bus, engine: Engine | None) -> bytes:
        """The text of ``/metrics``: this process's metrics (or, with a directory, every
        process's), the queue's depth now and, with an engine here, its load now."""
        if engine is not None:
            self.sample(engine)
        await self._queue.refresh(bus)
        return await asyncio.to_thread(generate_latest, self._scrape)

    def close(self) -> None:
        """This process is leaving: its live gauges (open streams, engine load) go with it."""
        if self.directory is not None:
            mark_process_dead(os.getpid(), str(self.directory))  # type: ignore[no-untyped-call]


def _grown(seen: int, now: int) -> int:
    """How much a counter kept by an engine grew since seen (all of it if it restarted)."""
    return now - seen if now >= seen else now


_multiprocess_value: Any = None


def _use_directory(directory: Path | None) -> None:
    """Where metric values live from now on: in this process's memory, or in files in
    ``directory`` that every process of the host reads (one value class per process)."""
    global _multiprocess_value
    if directory is None:
        prometheus_values.ValueClass = prometheus_values.MutexValue
        return
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    if _multiprocess_value is None:
        current = prometheus_values.ValueClass  # multiprocess already if the environment said so
        if getattr(current, "_multiprocess", False):
            _multiprocess_value = current
        else:
            _multiprocess_value = prometheus_values.MultiProcessValue()  # type: ignore[no-untyped-call]
    prometheus_values.ValueClass = _multiprocess_value


def build_metrics(
    seen: ObservabilitySettings, engines: EngineSettings, qos: QosSettings
) -> Metrics:
    """The metrics of one process, on the settings' ``metrics_dir`` if any."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series
    _use_directory(seen.metrics_dir)
    return Metrics(engines, qos, seen.metrics_dir)
