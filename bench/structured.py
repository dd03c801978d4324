"""Structured output side by side: parley's built-in engine (llguidance, ``builtin/grammar.py``)
and llama.cpp's ``llama-server`` (its JSON-schema grammar), both serving the bundled
SmolLM2-135M-Instruct over OpenAI's API.

    .venv/bin/python bench/structured.py [--schemas 50] [--max-tokens 192] [--skip-peer]

For each of ``--schemas`` JSON schemas (made here: objects of strings, integers, numbers,
booleans, enums, arrays and nested objects, each bounded) and its prompt, at temperature 0
and 1: the share of answers that parse and validate against their schema (``jsonschema``),
and the answers that ran out of ``max_tokens`` first. Then the grammar's cost: tokens/s of the
same prompts with and without ``response_format`` at concurrency 1 and 8. Goals (issue 42):
100% valid on parley; the grammar costs at most 10% of tokens/s.

The peer is built by ``bench/peers/llama_server.sh`` (``PARLEY_PEERS_DIR`` names its cache);
``--skip-peer`` measures parley alone. Servers' output goes to build/peers/logs/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_vs_peer import PEERS, Server, free_port

# a connection per request: llama-server drops idle keep-alive connections, and a request
# sent on one it just closed fails ("Server disconnected without sending a response")
FRESH = httpx.Limits(max_keepalive_connections=0)

SCALARS: list[dict[str, Any]] = [
    {"type": "string", "maxLength": 24},
    {"type": "integer", "minimum": 0, "maximum": 1000},
    {"type": "number"},
    {"type": "boolean"},
    {"enum": ["red", "green", "blue"]},
    {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5},
]
WORDS = ["name", "city", "age", "score", "color", "tags", "ok", "count", "title", "year"]
SUBJECTS = ["a person", "a city", "a book", "a recipe", "a planet", "a song", "a car", "a film"]


def schemas(n: int, seed: int = 42) -> list[tuple[str, dict[str, Any]]]:
    """``n`` bounded schemas and their prompts, the same every run."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        keys = rng.sample(WORDS, rng.randint(1, 4))
        properties = {k: rng.choice(SCALARS) for k in keys}
        if i % 5 == 4:  # a nested object now and then
            properties["detail"] = {
                "type": "object",
                "properties": {"note": {"type": "string", "maxLength": 20}},
                "required": ["note"],
                "additionalProperties": False,
            }
        schema = {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }
        subject = rng.choice(SUBJECTS)
        prompt = f"Describe {subject} as JSON with the fields {', '.join(properties)}."
        out.append((prompt, schema))
    return out


async def ask(
    client: httpx.AsyncClient, model: str, prompt: str, schema: dict[str, Any] | None, **kw: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        **kw,
    }
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    r = await client.post("/chat/completions", json=body)
    r.raise_for_status()
    return dict(r.json())


def valid(answer: dict[str, Any], schema: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


async def validity(
    server: Server, cases: list[tuple[str, dict[str, Any]]], temperature: float, max_tokens: int
) -> dict[str, Any]:
    gate = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=600, limits=FRESH) as client:

        async def one(seed: int, prompt: str, schema: dict[str, Any]) -> tuple[bool, bool]:
            async with gate:
                got = await ask(
                    client,
                    server.model,
                    prompt,
                    schema,
                    temperature=temperature,
                    seed=seed,
                    max_tokens=max_tokens,
                )
            cut = got["choices"][0]["finish_reason"] == "length"
            return valid(got, schema), cut

        results = await asyncio.gather(*(one(i, p, s) for i, (p, s) in enumerate(cases)))
    return {
        "valid": sum(v for v, _ in results),
        "cut": sum(c for _, c in results),
        "n": len(results),
    }


async def throughput(
    server: Server,
    cases: list[tuple[str, dict[str, Any]]],
    concurrency: int,
    grammar: bool,
    max_tokens: int,
) -> float:
    """Decode speed, greedy, ``concurrency`` at a time: each answer's tokens after its first
    over the time they took (streamed), averaged over the answers. Per answer, not over
    the run: an answer under a grammar is shorter (compact JSON), and a total over a batch
    that drains sooner would count that against the grammar."""
    gate = asyncio.Semaphore(concurrency)
    rates: list[float] = []
    async with httpx.AsyncClient(base_url=server.base_url, timeout=600, limits=FRESH) as client:

        async def one(prompt: str, schema: dict[str, Any]) -> None:
            body: dict[str, Any] = {
                "model": server.model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
                "max_tokens": max_tokens,
                "stream": True,
            }
            if grammar:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "schema": schema, "strict": True},
                }
            async with gate, client.stream("POST", "/chat/completions", json=body) as r:
                times = [
                    time.perf_counter()
                    async for line in r.aiter_lines()
                    if line.startswith("data: {") and '"content":"' in line.replace(" ", "")
                ]
            if len(times) > 2:
                rates.append((len(times) - 1) / (times[-1] - times[0]))

        await asyncio.gather(*(one(p, s) for p, s in cases))
    return sum(rates) / len(rates) if rates else 0.0


async def measure(
    server: Server, cases: list[tuple[str, dict[str, Any]]], args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for temperature in (0.0, 1.0):
        out[f"t{temperature:g}"] = await validity(server, cases, temperature, args.max_tokens)
    few = cases[: args.speed_cases]
    for level in (1, 8):
        # with and without, alternating which goes first, on the same prompts
        first, second = (True, False) if level == 1 else (False, True)
        a = await throughput(server, few, level, first, args.max_tokens)
        b = await throughput(server, few, level, second, args.max_tokens)
        with_, without = (a, b) if first else (b, a)
        out[f"c{level}"] = {"grammar": with_, "free": without}
    return out


def report(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = [f"| measure | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    for t in ("t0", "t1"):
        cells = []
        for name in names:
            r = results[name][t]
            cells.append(f"{r['valid']}/{r['n']} valid ({r['cut']} cut at max_tokens)")
        lines.append(f"| temperature {t[1:]} | {' | '.join(cells)} |")
    for level in (1, 8):
        cells = []
        for name in names:
            r = results[name][f"c{level}"]
            cost = 1 - r["grammar"] / r["free"] if r["free"] else float("nan")
            cells.append(
                f"{r['grammar']:.1f} vs {r['free']:.1f} tok/s a stream (grammar ÷ free "
                f"{r['grammar'] / r['free']:.2f}, cost {cost:+.0%})"
            )
        lines.append(f"| concurrency {level} | {' | '.join(cells)} |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    cases = schemas(args.schemas)
    python_bin = Path(sys.executable).parent
    servers: list[Server] = []
    port = free_port()
    servers.append(
        Server(
            "builtin",
            [
                str(python_bin / "parley"),
                "engine",
                "serve",
                "--engine",
                "builtin",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            port,
        )
    )
    if not args.skip_peer:
        port = free_port()
        servers.append(
            Server("llama-server", [str(PEERS["llama-server"]), "serve", str(port)], port)
        )
    results: dict[str, dict[str, Any]] = {}
    try:
        for server in servers:
            await server.ready(args.startup_timeout)
        for server in servers:
            results[server.label] = await measure(server, cases, args)
            print(f"measured {server.label}", flush=True)
    finally:
        for server in servers:
            server.stop()
    print(
        f"\n{args.schemas} schemas, max_tokens {args.max_tokens}, "
        f"speed over the first {args.speed_cases}\n"
    )
    print(report(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--speed-cases", type=int, default=16)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--startup-timeout", type=float, default=900)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
