"""The planner (capacity/plan.py) and its throughput curve (capacity/curve.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from parley.capacity.curve import Curve, Point, from_engine_json, from_metrics, parse_points
from parley.capacity.kv import CapacityInputError, preset
from parley.capacity.plan import (
    Given,
    Inputs,
    Replica,
    Shape,
    Source,
    Targets,
    Traffic,
    make_plan,
)

CURVE = parse_points("1:40,8:300,32:1000,64:1600,128:2200", measured=True)


def inputs(
    *,
    curve: Curve = CURVE,
    memory: float | None = 110e9,
    itl_ms: float = 50,
    context: float | None = None,
    users: float = 20_000,
) -> Inputs:
    return Inputs(
        Traffic(Given(users), Given(0.1), Given(1.0)),
        Shape(Given(2000), Given(500), None if context is None else Given(context)),
        Replica(
            preset("llama-3-70b"),
            Source.MEASURED,
            None if memory is None else Given(memory, Source.MEASURED),
            curve,
            Given(0.3),
        ),
        Targets(Given(2.0), Given(itl_ms / 1000), "p95"),
    )


def test_lambda_is_users_times_active_times_messages_per_minute() -> None:
    plan = make_plan(inputs())
    assert plan.arrival_rate == pytest.approx(20_000 * 0.1 * 1.0 / 60)


def test_a_tight_itl_target_makes_latency_not_memory_the_limit() -> None:
    plan = make_plan(inputs(itl_ms=50))
    assert plan.by_memory == int(110e9 // (2500 * 163_840)) == 268
    assert plan.limit == "latency"
    assert plan.concurrency == plan.by_latency < plan.by_memory
    assert plan.itl_s <= 0.050
    assert CURVE.itl(plan.concurrency + 1) > 0.050


def test_long_contexts_make_memory_the_limit() -> None:
    plan = make_plan(inputs(itl_ms=200, context=8192, memory=20e9))
    assert plan.by_memory == int(20e9 // (8192 * 163_840)) == 14
    assert plan.limit == "memory"
    assert plan.concurrency == 14
    assert plan.by_latency > plan.by_memory  # what the ITL target alone would allow


def test_the_replica_count_is_the_fewest_that_meets_the_ttft_target() -> None:
    plan = make_plan(inputs())
    assert plan.ttft_s <= 2.0
    assert plan.queue.servers == plan.replicas * plan.concurrency
    fewer = replace(plan.queue, servers=(plan.replicas - 1) * plan.concurrency)
    assert not fewer.stable or fewer.wait_percentile(0.95) + 0.3 > 2.0


def test_littles_law_per_replica() -> None:
    plan = make_plan(inputs())
    w = plan.queue.mean_wait + plan.service_s
    assert plan.in_system == pytest.approx(plan.arrival_rate / plan.replicas * w)
    # the replicas' L together is the whole queue's L
    assert plan.in_system * plan.replicas == pytest.approx(plan.queue.mean_in_system)
    assert plan.in_system <= plan.concurrency  # a stable replica holds fewer than its slots


def test_the_service_time_is_prefill_plus_the_remaining_tokens_at_the_itl() -> None:
    plan = make_plan(inputs())
    assert plan.service_s == pytest.approx(0.3 + 499 * plan.itl_s)


def test_past_the_measured_concurrency_it_warns() -> None:
    short = parse_points("1:40,8:300,16:520", measured=True)
    plan = make_plan(inputs(curve=short, itl_ms=50))
    assert plan.concurrency > 16
    assert any("extrapolating" in w and "16" in w for w in plan.warnings)
    within = make_plan(inputs(itl_ms=50))
    assert not any("extrapolating" in w for w in within.warnings)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"itl_ms": 10}, "ITL target"),
        ({"memory": 1e6}, "does not fit the KV memory"),
        ({"context": 100_000}, "window"),
        ({"users": -5}, "users must be a positive number"),
    ],
)
def test_impossible_inputs_say_why(change: dict[str, float], message: str) -> None:
    with pytest.raises(CapacityInputError, match=message):
        make_plan(inputs(**change))  # type: ignore[arg-type]


def test_the_curve_interpolates_and_holds_flat_past_its_end() -> None:
    assert CURVE.tokens_per_s(20) == pytest.approx(650)
    assert CURVE.tokens_per_s(256) == 2200
    assert CURVE.extrapolated(129) and not CURVE.extrapolated(128)
    assert CURVE.itl(0.5) == pytest.approx(CURVE.itl(1))  # below: the first point's ITL
    with pytest.raises(CapacityInputError, match="must increase"):
        Curve((Point(8, 100), Point(4, 50)), "x", True)
    with pytest.raises(CapacityInputError, match="CONCURRENCY:TOKENS_PER_S"):
        parse_points("8-100")


def test_the_curve_reads_bench_engines_json(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    levels = {
        "8": {"tok_s": 300.0, "itl_p50": 0.026, "ttft_p50": 0.2},
        "1": {"tok_s": 40.0, "itl_p50": 0.025, "ttft_p50": 0.1},
    }
    path.write_text(json.dumps({"sides": {"parley-fp32": {"label": "x", "levels": levels}}}))
    curve = from_engine_json(path)
    assert [p.concurrency for p in curve.points] == [1, 8]
    assert curve.ttft() == 0.1 and curve.measured
    with pytest.raises(CapacityInputError, match="no side 'vllm'"):
        from_engine_json(path, "vllm")


def test_one_point_from_live_metrics() -> None:
    text = "\n".join(
        [
            'parley_engine_batch_size{model="m"} 12.0',
            'parley_inter_token_latency_seconds_sum{model="m",tier="free"} 6.0',
            'parley_inter_token_latency_seconds_count{model="m",tier="free"} 200.0',
            'parley_inter_token_latency_seconds_bucket{model="m",tier="free",le="+Inf"} 200.0',
        ]
    )
    curve = from_metrics(text, "http://x/metrics")
    assert curve.points == (Point(12.0, 12.0 / 0.03),)
    with pytest.raises(CapacityInputError, match="no load"):
        from_metrics("parley_engine_batch_size 0\n", "http://x/metrics")
