"""``parley capacity``: how many engine replicas, and what users will wait.

Every number is an input labelled measured or assumed: a throughput curve read from a file
(``bench/engine.py --json``) or a live ``/metrics`` is measured; anything else is assumed
unless ``--measured NAME,...`` says otherwise. Bad input: a message and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from parley.capacity.curve import Curve, from_engine_json, from_metrics, parse_points
from parley.capacity.kv import CapacityInputError, ModelDims, parse_bytes, preset
from parley.capacity.plan import (
    PERCENTILES,
    Given,
    Inputs,
    Replica,
    Shape,
    Source,
    Targets,
    Traffic,
    make_plan,
)
from parley.capacity.report import render
from parley.config import Settings

MEASURABLE = (
    "users", "active-fraction", "messages-per-minute", "rate", "prompt-tokens",
    "output-tokens", "context-tokens", "kv-memory", "prefill-ms", "service-cv2",
    "curve", "model",
)  # fmt: skip


def add_capacity_parser(sub: Any) -> None:
    """``parley capacity``."""
    p = sub.add_parser(
        "capacity",
        help="plan engine replicas for a load: concurrency, KV memory, queue wait",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _traffic_args(p)
    _model_args(p)
    _curve_args(p)
    p.add_argument("--ttft-target-ms", type=float, default=2000, help="(2000)")
    p.add_argument("--itl-target-ms", type=float, default=100, help="(100)")
    p.add_argument("--percentile", choices=list(PERCENTILES), default="p95", help="of TTFT")
    p.add_argument(
        "--measured", default="", help=f"inputs you measured, of: {','.join(MEASURABLE)}"
    )
    p.set_defaults(handler=handler)


def _traffic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--users", type=float, help="users in all")
    p.add_argument("--active-fraction", type=float, help="of the users, active at the peak")
    p.add_argument("--messages-per-minute", type=float, help="per active user")
    p.add_argument("--rate", type=float, help="requests/s (instead of the three above)")
    p.add_argument("--prompt-tokens", type=float, required=True, help="per message")
    p.add_argument("--output-tokens", type=float, required=True, help="per message")
    p.add_argument("--context-tokens", type=float, help="KV a sequence holds (prompt+output)")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a preset: llama-3-70b, llama-3-8b, smollm2-135m")
    p.add_argument("--layers", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--context-length", type=int, default=8192, help="the model's window")
    p.add_argument("--kv-dtype", help="fp32, bf16, fp16, fp8, int8, int4 (a preset's own)")
    p.add_argument("--kv-memory", help="per replica, left for the KV cache: 110GB, 80GiB")


def _curve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--curve", help="CONCURRENCY:TOKENS_PER_S,... e.g. 1:40,8:250,32:610")
    p.add_argument("--curve-json", type=Path, help="bench/engine.py --json output")
    p.add_argument("--curve-side", help="which side of it (default: its first)")
    p.add_argument("--metrics", help="a live /metrics URL: one operating point")
    p.add_argument("--prefill-ms", type=float, help="the engine's own TTFT (default: curve's)")
    p.add_argument("--service-cv2", type=float, default=1.0, help="Cs² of the service time")


async def handler(args: argparse.Namespace, settings: Settings) -> int:
    try:
        curve = await _curve(args)
        plan = make_plan(inputs(args, curve))
    except CapacityInputError as e:
        print(f"parley capacity: {e}", file=sys.stderr)
        return 2
    print(render(plan))
    return 0


def _measured(args: argparse.Namespace) -> set[str]:
    names = {n.strip() for n in args.measured.split(",") if n.strip()}
    unknown = names - set(MEASURABLE)
    if unknown:
        raise CapacityInputError(
            f"--measured: unknown {', '.join(sorted(unknown))}; of {', '.join(MEASURABLE)}"
        )
    return names


def _given(args: argparse.Namespace, name: str, measured: set[str], scale: float = 1) -> Given:
    value = getattr(args, name.replace("-", "_"))
    source = Source.MEASURED if name in measured else Source.ASSUMED
    return Given(float(value) * scale, source)


def _maybe(args: argparse.Namespace, name: str, measured: set[str]) -> Given | None:
    value = getattr(args, name.replace("-", "_"))
    return None if value is None else _given(args, name, measured)


async def _curve(args: argparse.Namespace) -> Curve:
    chosen = [x for x in (args.curve, args.curve_json, args.metrics) if x is not None]
    if len(chosen) != 1:
        raise CapacityInputError("give one throughput curve: --curve, --curve-json or --metrics")
    if args.curve_json is not None:
        return from_engine_json(args.curve_json, args.curve_side)
    if args.metrics is not None:
        import httpx  # here: the parser is built for every command

        try:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.get(args.metrics)
                r.raise_for_status()
        except httpx.HTTPError as e:
            raise CapacityInputError(f"cannot read {args.metrics}: {e}") from None
        return from_metrics(r.text, args.metrics)
    return parse_points(args.curve, measured="curve" in _measured(args))


def model(args: argparse.Namespace, measured: set[str]) -> tuple[ModelDims, Source]:
    if args.model is not None:
        dims = preset(args.model)
        return (dims.with_dtype(args.kv_dtype) if args.kv_dtype else dims), Source.MEASURED
    if None in (args.layers, args.kv_heads, args.head_dim):
        raise CapacityInputError("give --model PRESET, or --layers, --kv-heads and --head-dim")
    dims = ModelDims(
        "the model",
        args.layers,
        args.kv_heads,
        args.head_dim,
        args.kv_dtype or "bf16",
        args.context_length,
        "given dims",
    )
    return dims, Source.MEASURED if "model" in measured else Source.ASSUMED


def inputs(args: argparse.Namespace, curve: Curve) -> Inputs:
    m = _measured(args)
    traffic = Traffic(
        _maybe(args, "users", m),
        _maybe(args, "active-fraction", m),
        _maybe(args, "messages-per-minute", m),
        _maybe(args, "rate", m),
    )
    shape = Shape(
        _given(args, "prompt-tokens", m),
        _given(args, "output-tokens", m),
        _maybe(args, "context-tokens", m),
    )
    dims, source = model(args, m)
    memory = None
    if args.kv_memory is not None:
        kind = Source.MEASURED if "kv-memory" in m else Source.ASSUMED
        memory = Given(parse_bytes(args.kv_memory), kind)
    return Inputs(traffic, shape, Replica(dims, source, memory, curve, _prefill(args, curve, m),
        _given(args, "service-cv2", m)), _targets(args))  # fmt: skip


def _prefill(args: argparse.Namespace, curve: Curve, measured: set[str]) -> Given:
    if args.prefill_ms is not None:
        return _given(args, "prefill-ms", measured, 1e-3)
    ttft = curve.ttft()
    if ttft is None:
        raise CapacityInputError("give --prefill-ms: the curve has no time to first token")
    return Given(ttft, Source.MEASURED, "the curve's TTFT at its lowest concurrency")


def _targets(args: argparse.Namespace) -> Targets:
    return Targets(
        Given(args.ttft_target_ms / 1000, Source.ASSUMED, "target"),
        Given(args.itl_target_ms / 1000, Source.ASSUMED, "target"),
        args.percentile,
    )
