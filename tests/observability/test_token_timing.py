"""A run's inter-token gaps, counted locally and added to the histogram in bunches, give the
histogram exactly what one ``observe`` per gap gives: the same buckets, count and sum."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram

from parley.domain import utcnow
from parley.engines.interface import Delta
from parley.observability.metrics import ITL_BUCKETS
from parley.observability.token_timing import FLUSH_EVERY, TokenTimer


def _histogram(name: str) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    return registry, Histogram(name, "gaps", ["model"], registry=registry, buckets=ITL_BUCKETS)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.name.rsplit("_", 1)[-1], s.labels.get("le", "")): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_gaps_counted_in_bunches_are_the_histogram_of_one_observe_each() -> None:
    rng = random.Random(7)
    ours, timed = _histogram("ours")
    theirs, observed = _histogram("theirs")
    now = 0.0
    timer = TokenTimer(
        _histogram("ttft")[1].labels("m"), timed.labels("m"), utcnow(), clock=lambda: now
    )
    timer.see(Delta("first", 1))
    counted = 0
    while counted < 5 * FLUSH_EVERY + 17:  # several bunches and a remainder
        tokens = rng.choice([1, 1, 1, 2, 3])
        step = rng.choice([0.0, 0.004, 0.02, 0.05, 0.3, 2.0, 40.0]) * rng.random()
        now += step
        timer.see(Delta("x" * tokens, tokens))
        for _ in range(tokens):
            observed.labels("m").observe(step / tokens)
        counted += tokens
        if counted < FLUSH_EVERY:  # nothing is added before the first bunch is full
            assert _samples(ours)[("count", "")] == 0
    assert 0 < _samples(ours)[("count", "")] < counted  # bunches added, the rest not yet
    timer.close()
    mine, expected = _samples(ours), _samples(theirs)
    assert mine.keys() == expected.keys()
    for key, value in expected.items():
        assert mine[key] == pytest.approx(value), key
    assert mine[("count", "")] == counted
    timer.close()  # closing again adds nothing
    assert _samples(ours) == mine


def test_a_delta_without_tokens_is_no_gap_and_the_first_token_is_timed_once() -> None:
    gaps, timed = _histogram("gaps")
    ttft_registry, first = _histogram("first")
    now = 0.0
    timer = TokenTimer(first.labels("m"), timed.labels("m"), utcnow(), clock=lambda: now)
    timer.see(Delta("", 0))  # (a role or usage delta: no token)
    timer.see(Delta("a", 1))
    now = 1.0
    timer.see(Delta("", 0))
    timer.see(Delta(" b", 1))
    timer.close()
    assert _samples(ttft_registry)[("count", "")] == 1
    assert _samples(gaps)[("count", "")] == 1
    assert _samples(gaps)[("sum", "")] == pytest.approx(1.0)
