"""Load any OpenAI-compatible server with streamed chat completions, level by level.

    .venv/bin/python bench/peers/openai_load.py --base-url http://127.0.0.1:8392/v1 \\
        [--model NAME] [--levels 1,8,32,64] [--requests N] [--max-tokens 64] [--ignore-eos]

At each concurrency level the same prompts ("Write a short poem about <topic>.", greedy,
``max_tokens`` each, ``stream: true`` with ``stream_options.include_usage``) are sent with at
most that many requests in flight. Per level: aggregate output tokens/s over the level's wall
time (tokens from the final ``usage`` chunk; content chunks counted when a server sends none),
time to first token (request sent → first chunk with content) and inter-token latency (gaps
between content chunks as they arrive), p50/p99, and errors (HTTP status, broken stream, no
``[DONE]``). ``measure()`` is the same measurement for other bench scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

TOPICS = [
    "the sea",
    "mountains",
    "a city at night",
    "rain",
    "coffee",
    "old books",
    "trains",
    "gardens",
    "winter",
    "music",
    "bees",
    "the moon",
    "bridges",
    "markets",
    "clocks",
    "rivers",
]

Messages = list[dict[str, str]]


def prompts(n: int) -> list[Messages]:
    """``n`` chat requests; prompt ``i`` is the same text whatever ``n`` is."""
    return [
        [{"role": "user", "content": f"Write a short poem about {TOPICS[i % len(TOPICS)]}. ({i})"}]
        for i in range(n)
    ]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else 0.0


@dataclass
class _Result:
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    content_chunks: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None


def _read_chunk(chunk: dict[str, Any], res: _Result, start: float, last: float) -> float:
    """Account one parsed ``data:`` chunk; returns the time of the last content chunk."""
    usage = chunk.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        res.usage_tokens = int(usage["completion_tokens"])
    for choice in chunk.get("choices") or []:
        if choice.get("finish_reason"):
            res.finish_reason = choice["finish_reason"]
        if (choice.get("delta") or {}).get("content"):
            now = time.perf_counter()
            if res.ttft is None:
                res.ttft = now - start
            else:
                res.gaps.append(now - last)
            res.content_chunks += 1
            last = now
    return last


async def _one(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    messages: Messages,
    max_tokens: int,
    extra: dict[str, Any] | None = None,
) -> _Result:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    res = _Result()
    start = last = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:200]
                res.error = f"HTTP {response.status_code}: {text}"
                return res
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    res.done = True
                    break
                last = _read_chunk(json.loads(data), res, start, last)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    if res.error is None and not res.done:
        res.error = "stream ended without [DONE]"
    return res


async def measure(
    base_url: str,
    model: str,
    concurrency: int,
    prompts: list[Messages],
    max_tokens: int,
    *,
    timeout: float = 600.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Send every prompt, at most ``concurrency`` in flight; the level's figures as a dict.

    ``extra`` goes into every request's body as is (e.g. ``{"ignore_eos": True}``, which
    llama-server and vLLM both read, to force ``max_tokens`` output tokens).

    Keys: concurrency, requests, errors, first_error, output_tokens, elapsed_s, tok_s,
    ttft_p50/ttft_p99/itl_p50/itl_p99 (seconds), usage_reported (requests whose stream carried
    a usage chunk), finish_reasons (counts).
    """
    url = base_url.rstrip("/") + "/chat/completions"
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits) as client:

        async def gated(messages: Messages) -> _Result:
            async with gate:
                return await _one(client, url, model, messages, max_tokens, extra)

        start = time.perf_counter()
        results = await asyncio.gather(*(gated(m) for m in prompts))
        elapsed = time.perf_counter() - start
    ok = [r for r in results if r.error is None]
    tokens = sum(r.usage_tokens if r.usage_tokens is not None else r.content_chunks for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok for g in r.gaps]
    errors = [r.error for r in results if r.error is not None]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "output_tokens": tokens,
        "elapsed_s": elapsed,
        "tok_s": tokens / elapsed if elapsed > 0 else 0.0,
        "ttft_p50": pct(ttfts, 50),
        "ttft_p99": pct(ttfts, 99),
        "itl_p50": pct(gaps, 50),
        "itl_p99": pct(gaps, 99),
        "usage_reported": sum(r.usage_tokens is not None for r in ok),
        "finish_reasons": dict(Counter(r.finish_reason for r in ok)),
    }


async def complete(
    base_url: str,
    model: str,
    messages: Messages,
    max_tokens: int,
    *,
    timeout: float = 600.0,
    extra: dict[str, Any] | None = None,
) -> str:
    """One greedy (temperature 0) chat completion, not streamed: the answer's text."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        **(extra or {}),
    }
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout)) as client:
        response = await client.post(base_url.rstrip("/") + "/chat/completions", json=body)
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"] or "")


async def first_model(base_url: str) -> str:
    """The first model ``GET /models`` lists."""
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(base_url.rstrip("/") + "/models")
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])


def requests_for(concurrency: int, requests: int | None) -> int:
    """``requests`` when given, else max(2 x concurrency, 8)."""
    return requests if requests else max(2 * concurrency, 8)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| concurrency | requests | errors | tokens/s | TTFT p50 ms | TTFT p99 ms"
        " | ITL p50 ms | ITL p99 ms | usage sent | finish |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        finish = ", ".join(f"{k}: {v}" for k, v in r["finish_reasons"].items())
        lines.append(
            f"| {r['concurrency']} | {r['requests']} | {r['errors']} | {r['tok_s']:.1f}"
            f" | {r['ttft_p50'] * 1e3:.0f} | {r['ttft_p99'] * 1e3:.0f}"
            f" | {r['itl_p50'] * 1e3:.1f} | {r['itl_p99'] * 1e3:.1f}"
            f" | {r['usage_reported']}/{r['requests'] - r['errors']} | {finish} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8392/v1")
    parser.add_argument("--model", default=None, help="default: the first of GET /models")
    parser.add_argument("--levels", default="1,8,32,64")
    parser.add_argument(
        "--requests", type=int, default=None, help="per level (default max(2 x level, 8))"
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=1, help="requests sent before measuring")
    parser.add_argument(
        "--ignore-eos", action="store_true", help="send ignore_eos: always max-tokens tokens"
    )
    args = parser.parse_args()
    model = args.model or await first_model(args.base_url)
    levels = [int(x) for x in args.levels.split(",")]
    extra = {"ignore_eos": True} if args.ignore_eos else None
    if args.warmup:
        await measure(args.base_url, model, 1, prompts(args.warmup), args.max_tokens, extra=extra)
    rows = []
    for n in levels:
        row = await measure(
            args.base_url,
            model,
            n,
            prompts(requests_for(n, args.requests)),
            args.max_tokens,
            extra=extra,
        )
        rows.append(row)
        if row["first_error"]:
            print(f"level {n}: first error: {row['first_error']}")
    print(f"\n{args.base_url}, model {model}, {args.max_tokens} output tokens per request\n")
    print(table(rows))


if __name__ == "__main__":
    asyncio.run(main())
