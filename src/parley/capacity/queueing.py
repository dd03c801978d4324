"""Queue waits for ``servers`` identical servers fed by one first-come-first-served queue.

* ``erlang_c``: the probability an arrival waits in an M/M/c queue (Poisson arrivals,
  exponential service), by the numerically stable Erlang B recursion.
* ``Queue``: mean and percentile waits. M/M/c's mean wait is ``C / (cμ - λ)``; for general
  arrivals and service (G/G/c) the Allen-Cunneen approximation scales it by
  ``(Ca² + Cs²) / 2`` (the squared coefficients of variation of the inter-arrival and service
  times: 1 for Poisson arrivals, ~0 for a nearly deterministic service time, where plain
  Erlang C overpredicts the wait about 2x). Percentiles from M/M/c's tail
  ``P(W > t) = C · e^{-(cμ-λ)t}``, its time axis scaled by the same factor (an
  approximation: it keeps the mean right).
* ``simulate``: a small discrete-event simulation of the same queue (seeded Poisson
  arrivals, service times drawn from the given ones), the check on the approximation.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


def erlang_c(servers: int, offered: float) -> float:
    """P(wait) for ``servers`` servers and ``offered`` = λ/μ erlangs (needs offered < servers)."""
    if servers < 1:
        raise ValueError(f"servers must be at least 1, not {servers}")
    if offered < 0:
        raise ValueError(f"offered load must be non-negative, not {offered}")
    if offered >= servers:
        return 1.0
    b = 1.0  # Erlang B with 0 servers
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1 - rho * (1 - b))


@dataclass(frozen=True, slots=True)
class Queue:
    arrival_rate: float  # λ, per second
    service_time: float  # S = 1/μ, seconds
    servers: int  # c
    ca2: float = 1.0  # inter-arrival times' squared coefficient of variation (Poisson: 1)
    cs2: float = 1.0  # service times' (exponential: 1; deterministic: 0)

    @property
    def offered(self) -> float:
        """λS, in erlangs: the servers busy on average."""
        return self.arrival_rate * self.service_time

    @property
    def utilization(self) -> float:
        return self.offered / self.servers

    @property
    def stable(self) -> bool:
        return self.utilization < 1

    @property
    def p_wait(self) -> float:
        return erlang_c(self.servers, self.offered)

    @property
    def variability(self) -> float:
        """Allen-Cunneen's factor (Ca² + Cs²) / 2."""
        return (self.ca2 + self.cs2) / 2

    @property
    def _drain(self) -> float:
        """cμ - λ: the rate the tail decays at, per second."""
        return self.servers / self.service_time - self.arrival_rate

    @property
    def mean_wait_mmc(self) -> float:
        if not self.stable:
            return math.inf
        return self.p_wait / self._drain

    @property
    def mean_wait(self) -> float:
        """Allen-Cunneen: M/M/c's mean wait x (Ca² + Cs²) / 2."""
        return self.mean_wait_mmc * self.variability

    def wait_percentile(self, p: float) -> float:
        """The wait that a share ``p`` (0 < p < 1) of arrivals do not exceed."""
        if not 0 < p < 1:
            raise ValueError(f"a percentile is in (0, 1), not {p}")
        if not self.stable:
            return math.inf
        c = self.p_wait
        if c <= 1 - p:
            return 0.0
        return self.variability * math.log(c / (1 - p)) / self._drain

    @property
    def mean_in_system(self) -> float:
        """L = λW (Little's law), W = mean wait + service."""
        return self.arrival_rate * (self.mean_wait + self.service_time)

    @property
    def mean_in_queue(self) -> float:
        return self.arrival_rate * self.mean_wait


@dataclass(frozen=True, slots=True)
class Simulated:
    customers: int
    mean_wait: float
    p95_wait: float
    p99_wait: float
    p_wait: float  # share that waited at all
    mean_in_system: float  # time-averaged, over the simulated span


def fcfs_starts(
    arrivals: Sequence[float], services: Sequence[float], servers: int, dispatch: float = 0.0
) -> list[float]:
    """When each arrival (in time order) starts on one of ``servers`` FCFS servers: at its
    arrival + ``dispatch`` if a server is free then, else when the first one frees (Kiefer and
    Wolfowitz's recursion). ``services[i]`` is how long arrival ``i`` holds its server."""
    free = [-math.inf] * servers  # when each server is next free (a heap)
    starts = []
    for t, service in zip(arrivals, services, strict=True):
        start = max(t + dispatch, free[0])
        heapq.heapreplace(free, start + service)
        starts.append(start)
    return starts


def simulate(
    arrival_rate: float,
    service_times: Sequence[float],
    servers: int,
    *,
    customers: int = 200_000,
    seed: int = 0,
) -> Simulated:
    """A G/G/c FCFS queue with Poisson arrivals: each customer's service drawn from
    ``service_times`` (a measured sample, or one value for a deterministic service); the
    first tenth of the customers is warm-up, left out."""
    if not service_times or servers < 1 or arrival_rate <= 0 or customers < 10:
        raise ValueError("simulate needs service times, a server, a positive rate, customers")
    rng = random.Random(seed)
    arrivals = list(itertools.accumulate(rng.expovariate(arrival_rate) for _ in range(customers)))
    services = [service_times[rng.randrange(len(service_times))] for _ in range(customers)]
    starts = fcfs_starts(arrivals, services, servers)
    warm = customers // 10
    waits = sorted(s - t for s, t in zip(starts[warm:], arrivals[warm:], strict=True))
    span = arrivals[-1] - arrivals[warm]
    n = len(waits)
    return Simulated(
        customers=n,
        mean_wait=sum(waits) / n,
        p95_wait=waits[min(n - 1, int(0.95 * n))],
        p99_wait=waits[min(n - 1, int(0.99 * n))],
        p_wait=sum(w > 0 for w in waits) / n,
        # Little's law over the counted customers: Σ (wait + service) ÷ the span they arrived in
        mean_in_system=(sum(waits) + sum(services[warm:])) / span if span > 0 else math.nan,
    )


def squared_cv(values: Sequence[float]) -> float:
    """The squared coefficient of variation (variance ÷ mean²) of a sample."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    if mean == 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return var / mean**2
