"""The fleet router: a model's replicas behind one Engine.

A run goes to the replica that consistent hashing of its affinity key (the chat id) picks,
so every turn of a conversation lands where its prefix is already in the KV cache. Each
replica has ``virtual_nodes * weight`` points on a 64-bit ring; the key's hash walks the
ring clockwise to the first replica that is healthy and not over its bound.

Bounded load (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam,
2018): with ``m`` requests in flight (this one included) and total weight ``W``, a replica
of weight ``w`` may hold at most ``ceil(c * m * w / W)``; a replica at its bound passes the
run on along the ring, so a hot chat or an unlucky cluster of keys spills to the next
replicas instead of queueing on one.

Health: a replica leaves the ring after ``failure_threshold`` consecutive failures (requests
that fail before their first token, answers that break off, failed probes) and its chats
remap to the next replicas; probes (``GET {base_url}{probe_path}`` every
``probe_interval_seconds``) bring it back after ``recovery_probes`` good answers in a row,
and its chats return with it. When no replica is healthy, all of them are tried (a fleet
that looks down as a whole is more likely a blip than an outage).

A failure before the first token is retried on the next replica along the ring, at most
``max_attempts`` replicas in all; after the first token nothing is retried (the text has
been streamed). Capacity is the sum of the replicas' slots.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import hashlib
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

from parley.engines.estimate import estimate
from parley.engines.interface import (
    ChatMessage,
    Delta,
    Engine,
    EngineError,
    EngineState,
    EngineUnavailable,
    FinishReason,
    GenerationRequest,
)
from parley.engines.settings import ReplicaSettings, UpstreamSettings
from parley.engines.upstream import UpstreamEngine

log = logging.getLogger(__name__)


def ring_hash(key: str) -> int:
    """A stable 64-bit hash (the same in every process, unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


@dataclass(slots=True, eq=False)
class Replica:
    """One server of the fleet and what the router knows of it."""

    label: str
    settings: ReplicaSettings
    engine: UpstreamEngine
    in_flight: int = 0
    healthy: bool = True
    failures: int = 0  # consecutive
    good_probes: int = 0  # consecutive, while unhealthy
    served: int = 0  # requests sent to it

    @property
    def slots(self) -> int:
        return self.settings.slots


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """A replica as reported (metrics, health, tests)."""

    label: str
    base_url: str
    healthy: bool
    in_flight: int
    served: int
    slots: int


class Router:
    def __init__(
        self,
        upstream_model: str,
        replicas: list[ReplicaSettings],
        settings: UpstreamSettings,
        *,
        make_engine: Callable[[ReplicaSettings], UpstreamEngine] | None = None,
    ) -> None:
        self.upstream_model = upstream_model
        self.settings = settings
        build = make_engine or (lambda r: UpstreamEngine(r.base_url, settings, label=r.label))
        self.replicas = [Replica(r.label, r, build(r)) for r in replicas]
        self._ring: list[tuple[int, int]] = []  # (point, replica index), sorted
        self._points: list[int] = []
        self._owners: dict[str, Replica] = {}
        self._aborted: set[str] = set()  # requests stopped while between two attempts
        self._streaming: set[str] = set()
        self._prober: asyncio.Task[None] | None = None
        self._rebuild()

    # -- Engine ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._prober is None:
            self._prober = asyncio.create_task(self._probe_forever(), name="replica-probes")

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return estimate(messages)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        await self.start()
        upstream = dataclasses.replace(request, model=self.upstream_model)
        key = request.affinity_key or request.request_id
        self._streaming.add(request.request_id)
        try:
            async with contextlib.aclosing(self._attempts(upstream, key)) as attempts:
                async for delta in attempts:
                    yield delta
        finally:
            self._streaming.discard(request.request_id)
            self._aborted.discard(request.request_id)

    async def _attempts(self, request: GenerationRequest, key: str) -> AsyncGenerator[Delta, None]:
        """The request on one replica after another, until one answers or fails it for good."""
        tried: set[Replica] = set()
        failure: EngineError | None = None
        for _ in range(self.settings.max_attempts):
            if request.request_id in self._aborted:
                yield Delta("", 0, FinishReason.ABORT)
                return
            replica = self.pick(key, exclude=tried)
            if replica is None:
                break
            tried.add(replica)
            started = False
            replica.in_flight += 1
            replica.served += 1
            self._owners[request.request_id] = replica
            inner = replica.engine.stream(request)
            try:
                async for delta in inner:
                    if not started:
                        started = True
                        replica.failures = 0
                    yield delta
                return
            except EngineError as e:
                if started or not e.retryable:
                    if started:
                        self._failed(replica, e)
                    raise
                self._failed(replica, e)
                failure = e
                log.warning("%s: retrying on the next replica: %s", replica.label, e)
            finally:
                replica.in_flight -= 1
                self._owners.pop(request.request_id, None)
                await inner.aclose()  # type: ignore[attr-defined]
        raise failure or EngineUnavailable("no replica of this model can take the request")

    async def abort(self, request_id: str) -> None:
        if request_id in self._streaming:
            self._aborted.add(request_id)
        replica = self._owners.get(request_id)
        if replica is not None:
            await replica.engine.abort(request_id)

    def state(self) -> EngineState:
        """Always ready: the replicas' health is the router's own (a replica down leaves
        the ring, a request finding none gets ``engine_unavailable``), not the process's."""
        return EngineState.READY

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None
        await asyncio.gather(*(r.engine.close() for r in self.replicas))

    # -- routing --------------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return sum(r.slots for r in self.replicas)

    def states(self) -> list[ReplicaState]:
        return [
            ReplicaState(r.label, r.engine.base_url, r.healthy, r.in_flight, r.served, r.slots)
            for r in self.replicas
        ]

    def home(self, key: str) -> Replica | None:
        """The replica a key's chats live on when no replica is loaded (its ring owner)."""
        order = self._walk(key)
        return order[0] if order else None

    def pick(
        self, key: str, exclude: set[Replica] | frozenset[Replica] = frozenset()
    ) -> Replica | None:
        """The first replica along the ring from ``key`` that is not excluded and is within its
        load bound; the least loaded of them if all are at it; None if all are excluded."""
        order = [r for r in self._walk(key) if r not in exclude]
        if not order:
            return None
        pool = [r for r in self.replicas if r.healthy] or self.replicas
        in_flight = sum(r.in_flight for r in pool) + 1
        weight = sum(r.settings.weight for r in pool)
        for replica in order:
            bound = math.ceil(
                self.settings.balance_factor * in_flight * replica.settings.weight / weight
            )
            if replica.in_flight + 1 <= bound:
                return replica
        return min(order, key=lambda r: r.in_flight / r.settings.weight)

    def _walk(self, key: str) -> list[Replica]:
        """The distinct replicas in ring order from ``key``'s point: the healthy ones, or all
        when none is."""
        ring = self._ring
        if not ring:
            return list(self.replicas)
        start = bisect.bisect(self._points, ring_hash(key))
        seen: list[Replica] = []
        for i in range(len(ring)):
            replica = self.replicas[ring[(start + i) % len(ring)][1]]
            if replica not in seen:
                seen.append(replica)
        return seen

    def _rebuild(self) -> None:
        healthy = [i for i, r in enumerate(self.replicas) if r.healthy]
        points: list[tuple[int, int]] = []
        for i in healthy:
            replica = self.replicas[i]
            count = max(1, round(self.settings.virtual_nodes * replica.settings.weight))
            points.extend((ring_hash(f"{replica.label}#{n}"), i) for n in range(count))
        points.sort()
        self._ring = points
        self._points = [p for p, _ in points]

    # -- health ---------------------------------------------------------------------------

    def _failed(self, replica: Replica, error: Exception) -> None:
        replica.failures += 1
        if replica.healthy and replica.failures >= self.settings.failure_threshold:
            self.set_health(replica, healthy=False, why=str(error))

    def set_health(self, replica: Replica, *, healthy: bool, why: str) -> None:
        replica.healthy = healthy
        replica.failures = 0
        replica.good_probes = 0
        self._rebuild()
        if healthy:
            log.info("replica %s is back on the ring", replica.label)
        else:
            log.warning("replica %s left the ring: %s", replica.label, why)

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(r) for r in self.replicas))
            await asyncio.sleep(self.settings.probe_interval_seconds)

    async def _probe(self, replica: Replica) -> None:
        ok = await replica.engine.probe(self.settings.probe_path)
        if replica.healthy:
            if ok:
                replica.failures = 0
            else:
                self._failed(replica, EngineUnavailable("its health probe failed"))
            return
        replica.good_probes = replica.good_probes + 1 if ok else 0
        if replica.good_probes >= self.settings.recovery_probes:
            self.set_health(replica, healthy=True, why="probes passed")


def _is_engine(router: Router) -> Engine:
    return router  # the router keeps the Engine contract (checked by mypy)
