"""A replica's throughput curve: aggregate output tokens/s against concurrency.

From ``bench/engine.py --json PATH`` (one side's levels), from ``N:TOKENS_PER_S`` pairs, or
one operating point read off a live ``/metrics`` (``parley_engine_batch_size`` for the
concurrency, ``parley_inter_token_latency_seconds`` sum ÷ count for the ITL: tokens/s =
concurrency ÷ ITL). Between points: linear interpolation. Below the first: that point's
inter-token latency (a batch smaller than measured is no slower a token). Past the last: the
last point's tokens/s held flat (the replica saturated: the conservative guess), flagged as
an extrapolation.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parley.capacity.kv import CapacityInputError


@dataclass(frozen=True, slots=True)
class Point:
    concurrency: float
    tokens_per_s: float
    ttft_s: float | None = None  # time to first token at this concurrency, if measured


@dataclass(frozen=True)
class Curve:
    points: tuple[Point, ...]
    origin: str  # where it came from, for the report
    measured: bool

    def __post_init__(self) -> None:
        if not self.points:
            raise CapacityInputError("the throughput curve has no points")
        last = 0.0
        for p in self.points:
            if not (p.concurrency > 0 and p.tokens_per_s > 0):
                raise CapacityInputError(
                    f"a curve point needs positive concurrency and tokens/s, not {p}"
                )
            if p.concurrency <= last:
                raise CapacityInputError("the curve's concurrencies must increase")
            last = p.concurrency

    @property
    def max_measured(self) -> float:
        return self.points[-1].concurrency

    def extrapolated(self, concurrency: float) -> bool:
        return concurrency > self.max_measured

    def tokens_per_s(self, concurrency: float) -> float:
        pts = self.points
        if concurrency <= pts[0].concurrency:
            return pts[0].tokens_per_s * concurrency / pts[0].concurrency
        if concurrency >= pts[-1].concurrency:
            return pts[-1].tokens_per_s
        i = bisect.bisect_left([p.concurrency for p in pts], concurrency)
        a, b = pts[i - 1], pts[i]
        share = (concurrency - a.concurrency) / (b.concurrency - a.concurrency)
        return a.tokens_per_s + share * (b.tokens_per_s - a.tokens_per_s)

    def itl(self, concurrency: float) -> float:
        """Seconds between one sequence's tokens when ``concurrency`` share the replica."""
        return concurrency / self.tokens_per_s(concurrency)

    def ttft(self) -> float | None:
        """The engine's own time to first token at the lowest measured concurrency."""
        return self.points[0].ttft_s


def parse_points(text: str, *, measured: bool = False) -> Curve:
    """``1:40,8:250,32:610`` (concurrency:tokens per second)."""
    points = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        n, sep, rate = part.partition(":")
        try:
            points.append(Point(float(n), float(rate)))
        except ValueError:
            raise CapacityInputError(
                f"curve point {part!r}: want CONCURRENCY:TOKENS_PER_S such as 8:250"
            ) from None
        if not sep:
            raise CapacityInputError(f"curve point {part!r}: want CONCURRENCY:TOKENS_PER_S")
    return Curve(tuple(points), "given points", measured)


def from_engine_json(path: Path, side: str | None = None) -> Curve:
    """One side of ``bench/engine.py --json PATH``'s output (default: its first)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CapacityInputError(f"cannot read the curve {path}: {e}") from None
    sides: dict[str, Any] = data.get("sides") if isinstance(data, dict) else None  # type: ignore[assignment]
    if not sides:
        raise CapacityInputError(f"{path} has no 'sides': not bench/engine.py --json output")
    name = side or next(iter(sides))
    if name not in sides:
        raise CapacityInputError(f"{path} has no side {name!r}: one of {', '.join(sides)}")
    levels = sides[name]["levels"]
    points = tuple(
        Point(float(n), float(r["tok_s"]), _float(r.get("ttft_p50")))
        for n, r in sorted(levels.items(), key=lambda kv: float(kv[0]))
    )
    return Curve(points, f"{path} ({name})", True)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def from_metrics(text: str, origin: str) -> Curve:
    """One operating point from a Prometheus text exposition of parley's ``/metrics``."""
    batch = _sum(text, "parley_engine_batch_size")
    itl_sum = _sum(text, "parley_inter_token_latency_seconds_sum")
    itl_count = _sum(text, "parley_inter_token_latency_seconds_count")
    if batch <= 0 or itl_count <= 0 or itl_sum <= 0:
        raise CapacityInputError(
            f"{origin}: no load to read (parley_engine_batch_size {batch:g}, "
            f"{itl_count:g} inter-token latencies): read it while the replica serves"
        )
    itl = itl_sum / itl_count
    return Curve((Point(batch, batch / itl),), f"{origin} (one point)", True)


def _sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            value = float(line.rsplit(" ", 1)[1])
            if math.isfinite(value):
                total += value
    return total
