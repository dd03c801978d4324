"""Erlang C, Allen-Cunneen and the discrete-event simulation (capacity/queueing.py)."""

from __future__ import annotations

import math
import random

import pytest

from parley.capacity.queueing import Queue, erlang_c, simulate, squared_cv


def erlang_c_closed_form(c: int, a: float) -> float:
    """The textbook formula, term by term (fine for small c)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_erlang_c_against_textbook_values() -> None:
    assert erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: P(wait) = rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2 at rho = 0.5
    assert erlang_c(10, 8.0) == pytest.approx(0.4092, abs=1e-4)  # a classic call-centre table
    for c in (1, 3, 8, 20):
        for rho in (0.3, 0.7, 0.95):
            assert erlang_c(c, c * rho) == pytest.approx(erlang_c_closed_form(c, c * rho))


def test_erlang_c_stays_finite_for_thousands_of_servers() -> None:
    p = erlang_c(5000, 4900.0)
    assert 0 < p < 1
    assert erlang_c(4, 4.0) == 1.0  # at or past capacity: everyone waits


def test_mm1_mean_wait_is_rho_over_mu_minus_lambda() -> None:
    q = Queue(arrival_rate=0.8, service_time=1.0, servers=1)
    assert q.mean_wait == pytest.approx(0.8 / (1 - 0.8))


def test_allen_cunneen_halves_the_wait_for_a_deterministic_service() -> None:
    mm = Queue(6.0, 1.0, 8, ca2=1, cs2=1)
    md = Queue(6.0, 1.0, 8, ca2=1, cs2=0)
    assert md.mean_wait == pytest.approx(mm.mean_wait / 2)
    # M/D/1 exactly (Pollaczek-Khinchine): rhoS / (2(1 - rho))
    assert Queue(0.5, 1.0, 1, cs2=0).mean_wait == pytest.approx(0.5 / (2 * 0.5))


def test_littles_law_holds_in_the_model() -> None:
    q = Queue(5.0, 1.2, 8, cs2=0.3)
    assert q.mean_in_system == pytest.approx(q.arrival_rate * (q.mean_wait + q.service_time))
    assert q.mean_in_queue == pytest.approx(q.arrival_rate * q.mean_wait)


def test_the_wait_tail_follows_the_mmc_exponential() -> None:
    q = Queue(7.0, 1.0, 8)
    t = q.wait_percentile(0.95)
    assert q.p_wait * math.exp(-(8 - 7.0) * t) == pytest.approx(0.05)
    assert Queue(1.0, 1.0, 8).wait_percentile(0.95) == 0.0  # almost nobody waits
    assert math.isinf(Queue(9.0, 1.0, 8).mean_wait)  # unstable


def test_the_simulation_agrees_with_erlang_c_for_exponential_service() -> None:
    rng = random.Random(1)
    services = [rng.expovariate(1.0) for _ in range(50_000)]
    sim = simulate(6.0, services, 8, customers=200_000, seed=2)
    q = Queue(6.0, 1.0, 8)
    assert sim.mean_wait == pytest.approx(q.mean_wait, rel=0.08)
    assert sim.p_wait == pytest.approx(q.p_wait, rel=0.05)
    assert sim.mean_in_system == pytest.approx(q.mean_in_system, rel=0.03)


def test_the_simulation_matches_md1_exactly() -> None:
    sim = simulate(0.8, [1.0], 1, customers=200_000, seed=3)
    assert sim.mean_wait == pytest.approx(0.8 / (2 * 0.2), rel=0.05)


def test_squared_cv() -> None:
    assert squared_cv([1.0, 1.0, 1.0]) == 0.0
    assert squared_cv([1.0]) == 0.0
    assert squared_cv([0.0, 2.0]) == pytest.approx(2.0)
