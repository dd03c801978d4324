"""What tracing costs a request: ns per request through the edge middleware (the server span)
and per engine delta (the engine.generate wrapper), tracing off vs on.

    python bench/tracing.py [--requests 20000] [--deltas 200000] [--rounds 5]

In-process and CPU only, each variant measured in interleaved rounds (this machine is shared
and noisy) and the best round of each printed. Per HTTP request, what ``api/edge.py`` adds for
tracing (``server_span`` + ``trace_id`` + ``respond``, called directly with a minimal ASGI
scope), and for scale the whole edge middleware around a trivial app:

* ``off``: tracing off (the default: no SDK, the API's no-op tracer), no ``traceparent``;
* ``off + traceparent``: off, a caller's ``traceparent`` passed through (nothing recorded);
* ``on``: tracing on (SDK, parent-based always-on sampling), spans handed to an exporter that
  drops them (the export itself happens on the OTLP exporter's own thread in production).

Then the same for an engine stream of deltas: the raw async generator vs
``tracing.generation`` off (returns the stream itself) and on.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from parley.api.edge import Edge
from parley.config import Settings
from parley.engines.interface import Delta
from parley.observability import tracing

TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Any) -> None:
    pass


async def _nothing() -> None:
    pass


def scope(traceparent: bool) -> dict[str, Any]:
    headers = [(b"host", b"parley"), (b"accept", b"application/json")]
    if traceparent:
        headers.append((b"traceparent", TRACEPARENT))
    return {"type": "http", "method": "GET", "path": "/api/me", "headers": headers}


async def hooks(n: int, traceparent: bool) -> float:
    """ns per request: the edge's tracing calls alone."""
    started = time.perf_counter_ns()
    for _ in range(n):
        with tracing.server_span(scope(traceparent)) as exchange:
            tracing.trace_id()
            exchange.respond(200)
    return (time.perf_counter_ns() - started) / n


async def requests(handler: Any, n: int, traceparent: bool) -> float:
    """ns per request."""
    started = time.perf_counter_ns()
    for _ in range(n):
        await handler(scope(traceparent), receive, send)
    return (time.perf_counter_ns() - started) / n


async def deltas(n: int, wrap: bool) -> float:
    """ns per delta."""

    async def stream() -> AsyncIterator[Delta]:
        for _ in range(n):
            yield Delta("x", 1)

    source = stream()
    it = tracing.generation(source, model="m", max_tokens=n) if wrap else source
    started = time.perf_counter_ns()
    async for _ in it:
        pass
    return (time.perf_counter_ns() - started) / n


def tracing_on(on: bool) -> None:
    if on:
        tracing.configure(Settings().observability, service="bench", exporter=Dropping())
    else:
        tracing.shutdown()


async def measure(args: argparse.Namespace) -> None:
    edge = Edge(app)
    variants: dict[str, Callable[[], Coroutine[Any, Any, float]]] = {
        "scope alone": lambda: requests(lambda *_: _nothing(), args.requests, False),
        "edge hooks, tracing off": lambda: hooks(args.requests, False),
        "edge hooks, off + traceparent": lambda: hooks(args.requests, True),
        "edge hooks, tracing on": lambda: hooks(args.requests, True),
        "whole edge, tracing off": lambda: requests(edge, args.requests, False),
        "whole edge, tracing on": lambda: requests(edge, args.requests, True),
        "deltas, raw stream": lambda: deltas(args.deltas, False),
        "deltas, tracing off": lambda: deltas(args.deltas, True),
        "deltas, tracing on": lambda: deltas(args.deltas, True),
    }
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, run in variants.items():
            tracing_on(name.endswith("tracing on"))
            best[name] = min(best.get(name, float("inf")), await run())
            tracing_on(False)
    print(f"{'variant':<30} {'ns':>9}")
    for name, ns in best.items():
        print(f"{name:<30} {ns:>9.0f}")
    floor = best["scope alone"]
    print(f"tracing off adds {best['edge hooks, tracing off'] - floor:.0f} ns to a request,")
    print(f"on adds {best['edge hooks, tracing on'] - floor:.0f} ns (span made, ended, handed on);")
    extra = best["deltas, tracing on"] - best["deltas, raw stream"]
    print(f"off adds nothing to a delta (the stream is not wrapped), on adds {extra:.0f} ns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--deltas", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
