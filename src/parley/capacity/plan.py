"""The planner: inputs, each labelled measured or assumed, → a ``Plan``.

A replica holding ``c`` sequences serves each in ``S(c) = prefill + (output - 1) x ITL(c)``
(ITL from the throughput curve). Its concurrency limit ``c*`` is the largest ``c`` with
``ITL(c) ≤`` the ITL target and ``c x context x KV bytes per token ≤`` its KV memory; the
report says which bound it. Then ``N`` replicas are ``N x c*`` servers of one queue (a
router spreading sequences over them) with service time ``S(c*)``: the smallest ``N`` whose
wait (Erlang C with the Allen-Cunneen correction, ``queueing.Queue``) plus the prefill keeps
the time to first token at the chosen percentile within its target. Little's law gives the
sequences in a replica: ``L = λ/N x (wait + S)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from parley.capacity.curve import Curve
from parley.capacity.kv import CapacityInputError, ModelDims
from parley.capacity.queueing import Queue

MAX_REPLICAS = 100_000
MAX_CONCURRENCY = 1_000_000
PERCENTILES = {"mean": None, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


class Source(StrEnum):
    MEASURED = "measured"
    ASSUMED = "assumed"


@dataclass(frozen=True, slots=True)
class Given:
    """One input: its value, whether it was measured or assumed, and where from."""

    value: float
    source: Source = Source.ASSUMED
    note: str = ""


@dataclass(frozen=True)
class Traffic:
    users: Given | None = None
    active_fraction: Given | None = None  # of the users, active at the peak
    messages_per_minute: Given | None = None  # per active user
    rate: Given | None = None  # requests per second, instead of the three above

    def arrival_rate(self) -> float:
        if self.rate is not None:
            return self.rate.value
        if self.users is None or self.active_fraction is None or self.messages_per_minute is None:
            raise CapacityInputError(
                "give a request rate, or users, an active fraction and messages per minute"
            )
        return self.users.value * self.active_fraction.value * self.messages_per_minute.value / 60


@dataclass(frozen=True)
class Shape:
    prompt_tokens: Given
    output_tokens: Given
    context_tokens: Given | None = None  # the KV a sequence holds; default prompt + output

    @property
    def context(self) -> float:
        if self.context_tokens is not None:
            return self.context_tokens.value
        return self.prompt_tokens.value + self.output_tokens.value


@dataclass(frozen=True)
class Replica:
    model: ModelDims
    model_source: Source
    kv_memory_bytes: Given | None  # left for the KV cache after weights and activations
    curve: Curve
    prefill_s: Given  # the engine's own time to first token (queue wait excluded)
    service_cv2: Given = field(default_factory=lambda: Given(1.0))  # Cs² of S
    arrival_cv2: Given = field(default_factory=lambda: Given(1.0))  # Ca² (Poisson: 1)


@dataclass(frozen=True)
class Targets:
    ttft_s: Given
    itl_s: Given
    percentile: str = "p95"


@dataclass(frozen=True)
class Inputs:
    traffic: Traffic
    shape: Shape
    replica: Replica
    targets: Targets


@dataclass(frozen=True)
class Plan:
    inputs: Inputs
    arrival_rate: float
    kv_bytes_per_token: int
    kv_bytes_per_sequence: float
    by_memory: int | None  # sequences a replica's KV memory holds (None: not given)
    by_latency: int  # sequences within the ITL target (memory aside)
    concurrency: int  # c* = min of the two
    limit: str  # "latency" or "memory"
    itl_s: float  # at c*
    service_s: float  # S(c*)
    replicas: int
    queue: Queue
    wait_s: float  # at the target's percentile
    ttft_s: float  # wait + prefill, at that percentile
    warnings: tuple[str, ...]

    @property
    def per_replica_rate(self) -> float:
        return self.arrival_rate / self.replicas

    @property
    def in_system(self) -> float:
        """L = λW per replica (W: mean wait + service)."""
        return self.per_replica_rate * (self.queue.mean_wait + self.service_s)

    @property
    def in_queue(self) -> float:
        return self.per_replica_rate * self.queue.mean_wait


def validate(inputs: Inputs) -> None:
    """Every number where it must be; a ``CapacityInputError`` naming the first that is not."""
    t, s, r, g = inputs.traffic, inputs.shape, inputs.replica, inputs.targets
    positive = {
        "users": t.users,
        "messages per minute": t.messages_per_minute,
        "rate": t.rate,
        "prompt tokens": s.prompt_tokens,
        "output tokens": s.output_tokens,
        "context tokens": s.context_tokens,
        "KV memory": r.kv_memory_bytes,
        "TTFT target": g.ttft_s,
        "ITL target": g.itl_s,
    }
    for name, given in positive.items():
        if given is not None and not (math.isfinite(given.value) and given.value > 0):
            raise CapacityInputError(f"{name} must be a positive number, not {given.value:g}")
    if t.active_fraction is not None and not 0 < t.active_fraction.value <= 1:
        raise CapacityInputError(
            f"the active fraction must be in (0, 1], not {t.active_fraction.value:g}"
        )
    for name, given in (("prefill", r.prefill_s), ("Cs²", r.service_cv2), ("Ca²", r.arrival_cv2)):
        if not (math.isfinite(given.value) and given.value >= 0):
            raise CapacityInputError(f"{name} must be zero or more, not {given.value:g}")
    if g.percentile not in PERCENTILES:
        raise CapacityInputError(f"percentile {g.percentile!r}: one of {', '.join(PERCENTILES)}")
    if s.context > r.model.context_length:
        raise CapacityInputError(
            f"a sequence of {s.context:g} tokens does not fit {r.model.name}'s"
            f" {r.model.context_length}-token window"
        )
    t.arrival_rate()


def make_plan(inputs: Inputs) -> Plan:
    validate(inputs)
    r, g = inputs.replica, inputs.targets
    lam = inputs.traffic.arrival_rate()
    kv_token = r.model.kv_bytes_per_token
    kv_seq = inputs.shape.context * kv_token
    by_memory = None
    if r.kv_memory_bytes is not None:
        by_memory = int(r.kv_memory_bytes.value // kv_seq)
        if by_memory < 1:
            raise CapacityInputError(
                f"one sequence's KV ({kv_seq:,.0f} bytes) does not fit the KV memory"
            )
    by_latency = latency_limit(r.curve, g.itl_s.value, MAX_CONCURRENCY)
    c = by_latency if by_memory is None else min(by_latency, by_memory)
    limit = "memory" if by_memory is not None and by_memory <= by_latency else "latency"
    itl = r.curve.itl(c)
    service = r.prefill_s.value + max(0.0, inputs.shape.output_tokens.value - 1) * itl
    replicas, queue, wait = size(inputs, lam, c, service)
    return Plan(
        inputs=inputs,
        arrival_rate=lam,
        kv_bytes_per_token=kv_token,
        kv_bytes_per_sequence=kv_seq,
        by_memory=by_memory,
        by_latency=by_latency,
        concurrency=c,
        limit=limit,
        itl_s=itl,
        service_s=service,
        replicas=replicas,
        queue=queue,
        wait_s=wait,
        ttft_s=wait + r.prefill_s.value,
        warnings=tuple(warnings(inputs, c, by_memory)),
    )


def latency_limit(curve: Curve, itl_target: float, cap: int) -> int:
    """The largest concurrency (≤ ``cap``) whose inter-token latency meets the target."""
    if curve.itl(1) > itl_target:
        raise CapacityInputError(
            f"the ITL target ({itl_target * 1000:g} ms) is below the replica's ITL with one"
            f" sequence ({curve.itl(1) * 1000:.1f} ms): no concurrency meets it"
        )
    best = 1
    for c in range(2, cap + 1):
        if curve.itl(c) <= itl_target:
            best = c
        elif curve.extrapolated(c):
            break  # past the curve the ITL only grows
    return best


def wait_at(queue: Queue, percentile: str) -> float:
    p = PERCENTILES[percentile]
    return queue.mean_wait if p is None else queue.wait_percentile(p)


def size(inputs: Inputs, lam: float, c: int, service: float) -> tuple[int, Queue, float]:
    """The fewest replicas whose TTFT at the percentile meets the target."""
    r, g = inputs.replica, inputs.targets
    if r.prefill_s.value > g.ttft_s.value:
        raise CapacityInputError(
            f"the engine's own time to first token ({r.prefill_s.value * 1000:g} ms) is over"
            f" the TTFT target ({g.ttft_s.value * 1000:g} ms): no replica count meets it"
        )
    n = max(1, math.floor(lam * service / c) + 1)
    while n <= MAX_REPLICAS:
        queue = Queue(lam, service, n * c, r.arrival_cv2.value, r.service_cv2.value)
        wait = wait_at(queue, g.percentile)
        if wait + r.prefill_s.value <= g.ttft_s.value:
            return n, queue, wait
        n += 1
    raise CapacityInputError(f"no count up to {MAX_REPLICAS} replicas meets the TTFT target")


def warnings(inputs: Inputs, c: int, by_memory: int | None) -> list[str]:
    r = inputs.replica
    out = []
    if r.curve.extrapolated(c):
        out.append(
            f"extrapolating: {c} sequences per replica is past the {r.curve.max_measured:g}"
            f" the curve measured (tokens/s held at its last point); measure higher"
        )
    if len(r.curve.points) == 1:
        out.append("the curve is one point: the ITL at other concurrencies is a guess")
    if by_memory is None:
        out.append("no KV memory given: memory is not checked")
    if not r.curve.measured:
        out.append("the throughput curve is assumed, not measured")
    return out
