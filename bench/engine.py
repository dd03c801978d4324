"""The built-in engine on the bundled SmolLM2-135M, against llama.cpp, vLLM, transformers.

    .venv/bin/python bench/engine.py [--precisions fp32,bf16,int8,int4,w8a8]
        [--peers llama-f32,llama-f32-f16kv,llama-q8_0,llama-q4_0,llama-q4_1,vllm]
        [--levels 1,8,32,64] [--rounds 2] [--quick] [--quality] [--classic] [--json PATH]

Peers (the default section): parley's engine in-process (``BuiltinEngine``, no HTTP) in each
precision against llama.cpp's ``llama-server`` on the bundled model as F32/Q8_0/Q4_0/Q4_1 GGUFs
(F32 or F16 KV cache) and vLLM's CPU build (fp32; a default column only when installed), the
peers over their OpenAI API (bench/peers/peer_servers.py starts them, 2 threads each). Same
prompts, ``--tokens`` (64) output tokens forced (the engine's end-of-turn tokens cleared,
``ignore_eos`` for the peers); per level max(2 x level, 8) requests (``--quick``: max(level, 4))
with at most ``level`` in flight. All sides are started first, then each level is measured on
every side in turn, the order alternating from level to level and round to round. Prints the
CPU, tokens/s and inter-token latency p50 per side and level (mean of the rounds, the rounds in
brackets), and parley ÷ peer for every precision/peer pair. ``--quality`` adds
bench/engine_quality.py's table (greedy agreement with fp32 over 50 prompts, and the
llama.cpp GGUFs' answers) in the same run.

``--classic``, the sections from before the peers, one table each:
(a) baseline: transformers' ``generate`` serving requests one after another;
(b) the engine with 1, 8, 32 and 64 concurrent requests: aggregate output tokens/s,
    time to first token and inter-token latency (p50/p99), as a client sees them;
(c) the next turn of a ~1,000-token conversation: time to first token with its prefix
    cached vs. cold;
(d) the floor: the bare weight matrix products of one decode step at each batch size,
    next to the engine's measured decode step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import peer_servers
import stacks
from engine_quality import quality_table
from openai_load import measure

from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, default_model_path, load_model
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.precision import NATIVE_BF16_FLAGS, Precision, cpu_flags
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import ChatMessage, GenerationRequest
from parley.engines.sampling import GREEDY

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else 0.0


def question(i: int) -> list[ChatMessage]:
    return [ChatMessage("user", f"Write a short paragraph about {TOPICS[i % len(TOPICS)]}. ({i})")]


# -- (a) transformers -----------------------------------------------------------------------


def baseline(loaded: LoadedModel, n: int, tokens: int) -> float:
    import transformers

    path = default_model_path()
    model: Any = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    model.eval()
    engine_for_ids = _ids(loaded)
    total_tokens = 0
    start = time.perf_counter()
    for i in range(n):
        ids = torch.tensor([engine_for_ids(question(i))])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
            )
        total_tokens += out.shape[1] - ids.shape[1]
    return total_tokens / (time.perf_counter() - start)


def _ids(loaded: LoadedModel) -> Callable[[list[ChatMessage]], list[int]]:
    def ids(messages: list[ChatMessage]) -> list[int]:
        text = loaded.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages]
        )
        return loaded.tokenizer.encode(text)

    return ids


# -- (b) the engine under concurrency -------------------------------------------------------


async def concurrent(
    engine: BuiltinEngine, n: int, tokens: int, requests: int | None = None
) -> dict[str, Any]:
    """``requests`` (default ``n``) requests, at most ``n`` in flight, as a client sees them."""
    ttfts: list[float] = []
    gaps: list[float] = []
    errors: list[str] = []
    produced = 0
    gate = asyncio.Semaphore(n)

    async def one(i: int) -> None:
        nonlocal produced
        req = GenerationRequest(
            f"b{n}-{i}-{uuid.uuid4().hex[:6]}", engine.name, question(i), tokens, GREEDY
        )
        async with gate:
            start = last = time.perf_counter()
            first = True
            try:
                async for delta in engine.stream(req):
                    now = time.perf_counter()
                    if delta.tokens:
                        produced += delta.tokens
                        if first:
                            ttfts.append(now - start)
                            first = False
                        else:
                            gaps.append(now - last)
                        last = now
            except Exception as exc:  # an engine error: counted, the level goes on
                errors.append(f"{type(exc).__name__}: {exc}")

    count = n if requests is None else requests
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    elapsed = time.perf_counter() - start
    return {
        "requests": count,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "output_tokens": produced,
        "tok_s": produced / elapsed,
        "ttft50": pct(ttfts, 50),
        "ttft99": pct(ttfts, 99),
        "itl50": pct(gaps, 50),
        "itl99": pct(gaps, 99),
    }


# -- (c) prefix cache --------------------------------------------------------------------------


def long_conversation(turns: int) -> list[ChatMessage]:
    messages = [ChatMessage("system", "You are a patient assistant who explains things.")]
    for i in range(turns):
        topic = TOPICS[i % len(TOPICS)]
        messages.append(ChatMessage("user", f"Tell me one fact about {topic}."))
        messages.append(
            ChatMessage(
                "assistant",
                f"Here is a fact about {topic}: people have written about {topic} for "
                "centuries, and each generation finds something new to say about it.",
            )
        )
    return messages


async def prefix_turn(engine: BuiltinEngine) -> tuple[int, float, float]:
    history = long_conversation(20)
    while len(engine.prompt_ids(history)) < 1000:
        history = long_conversation(len(history) // 2 + 2)
    first = [*history, ChatMessage("user", "And one more about clocks?")]
    nxt = [*history, ChatMessage("user", "And one more about bridges?")]

    async def ttft(messages: list[ChatMessage]) -> float:
        req = GenerationRequest(uuid.uuid4().hex, engine.name, messages, 1, GREEDY)
        start = time.perf_counter()
        async for _ in engine.stream(req):
            break
        return time.perf_counter() - start

    cold = await ttft(first)  # nothing of this conversation is cached yet
    warm = await ttft(nxt)  # the same history, a new last message
    return len(engine.prompt_ids(nxt)), cold, warm


# -- (d) the floor and the engine's decode step ---------------------------------------------


def floor_step(loaded: LoadedModel, batch: int, repeats: int = 10) -> float:
    """The weight matrix products of one decode step (every layer + the LM head), no attention."""
    cfg = loaded.config
    w = loaded.weights
    mats = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        for name in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ):
            mats.append(w[p + name + ".weight"])
    mats.append(w["model.embed_tokens.weight"])  # tied LM head
    xs = {m.shape[1]: torch.randn(batch, m.shape[1]) for m in mats}
    with torch.inference_mode():
        for m in mats:
            xs[m.shape[1]] @ m.T
        start = time.perf_counter()
        for _ in range(repeats):
            for m in mats:
                xs[m.shape[1]] @ m.T
    return (time.perf_counter() - start) / repeats


def decode_step(loaded: LoadedModel, batch: int, steps: int = 12) -> float:
    """The engine's mean decode step with ``batch`` sequences all decoding."""
    model = LlamaModel.from_hf(loaded.config, loaded.weights)
    core = EngineCore(model, num_blocks=4096, block_size=16, max_batch_tokens=8192)
    ids = _ids(loaded)
    for i in range(batch):
        core.add(Sequence(f"d{i}", ids(question(i)), SequenceSampling(max_tokens=steps + 4)))
    core.step()  # every prompt prefilled in one step
    times = []
    for _ in range(steps):
        core.step()
        assert core.last_step is not None and core.last_step.batch_sequences == batch
        times.append(core.last_step.seconds)
    return sorted(times)[len(times) // 2]


# -- (e) peers: llama.cpp and vLLM beside each precision ----------------------------------------


def force_length(engine: BuiltinEngine) -> None:
    """No end-of-turn token ends a sequence: every request runs to its max_tokens, as the
    peers do with ``ignore_eos`` (the benchmark checks the tokens it got)."""
    engine.core.eos = set()


class Side:
    """One column: a parley precision in-process or a peer over HTTP."""

    def __init__(self, name: str, label: str) -> None:
        self.name = name
        self.label = label
        self.rounds: dict[int, list[dict[str, Any]]] = {}
        self.failed: str | None = None

    async def level(self, n: int, requests: int, tokens: int) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ParleySide(Side):
    def __init__(self, loaded: LoadedModel, precision: str, kv_tokens: int) -> None:
        super().__init__(f"parley-{precision}", f"parley {precision}")
        self.engine = BuiltinEngine(
            loaded,
            BuiltinEngineConfig(kv_cache_tokens=kv_tokens, precision=Precision(precision)),
        )
        force_length(self.engine)
        self.closed = False

    async def level(self, n: int, requests: int, tokens: int) -> dict[str, Any]:
        r = await concurrent(self.engine, n, tokens, requests)
        return {**r, "itl_p50": r["itl50"], "ttft_p50": r["ttft50"]}

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self.engine.close()


class PeerSide(Side):
    def __init__(self, peer: peer_servers.Peer) -> None:
        note = f", {peer.note}" if peer.note else ""
        super().__init__(peer.name, peer.spec.label + note)
        self.peer = peer

    async def level(self, n: int, requests: int, tokens: int) -> dict[str, Any]:
        batch = [
            [{"role": m.role, "content": m.content} for m in question(i)] for i in range(requests)
        ]
        return await measure(
            self.peer.base_url, self.peer.model, n, batch, tokens, extra={"ignore_eos": True}
        )

    def close(self) -> None:
        self.peer.stop()


def cell(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:{fmt}}"
    return f"{mean:{fmt}} ({'/'.join(f'{v:{fmt}}' for v in values)})"


def mean_of(side: Side, n: int, key: str) -> float | None:
    rows = side.rounds.get(n, [])
    return sum(r[key] for r in rows) / len(rows) if rows else None


async def peers_section(args: argparse.Namespace, loaded: LoadedModel) -> None:
    levels = [int(x) for x in args.levels.split(",")]
    precisions = [p for p in args.precisions.split(",") if p]
    if args.peers is None:
        names = ["llama-f32", "llama-f32-f16kv", "llama-q8_0", "llama-q4_0", "llama-q4_1"]
        if peer_servers.vllm_installed():
            names.append("vllm")
    else:
        names = [n for n in args.peers.split(",") if n]

    def requests_for(n: int) -> int:
        return max(n, 4) if args.quick else max(2 * n, 8)

    started = time.perf_counter()
    flags = cpu_flags()
    print(
        f"CPU: {stacks.cpu()}; native bf16: {' '.join(sorted(NATIVE_BF16_FLAGS & flags)) or 'no'}"
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.tokens} output"
        f" tokens forced; levels {levels}, requests per level"
        f" {[requests_for(n) for n in levels]}, {args.rounds} rounds",
        flush=True,
    )
    sides: list[Side] = []
    missing: dict[str, str] = {}
    kv_tokens = max(16_384, max(levels) * (128 + args.tokens))
    for p in precisions:
        try:
            sides.append(ParleySide(loaded, p, kv_tokens))
        except (NotImplementedError, ValueError) as exc:
            missing[f"parley {p}"] = f"{type(exc).__name__}: {exc}"
    up, down = await peer_servers.start(names, threads=args.threads)
    for name, why in down.items():
        missing[peer_servers.PEERS[name].label if name in peer_servers.PEERS else name] = why
    sides += [PeerSide(up[n]) for n in names if n in up]
    for name, peer in up.items():
        print(f"{name}: ready in {peer.ready_s:.1f} s, {peer.rss_mb():.0f} MB resident", flush=True)
    try:
        # warm-up: lazy work (allocation, compilation, first-touch) stays unmeasured
        for side in sides:
            try:
                r = await side.level(max(levels), max(levels), 8)
                if r["errors"]:
                    raise RuntimeError(r["first_error"])
            except Exception as exc:
                side.failed = f"{type(exc).__name__}: {exc}"[:300]
                print(f"{side.label}: warm-up failed: {side.failed}", flush=True)
        live = [s for s in sides if s.failed is None]
        for rnd in range(args.rounds):
            for li, n in enumerate(levels):
                order = live if (rnd + li) % 2 == 0 else live[::-1]
                for side in order:
                    r = await side.level(n, requests_for(n), args.tokens)
                    side.rounds.setdefault(n, []).append(r)
                    short = r["output_tokens"] < r["requests"] * args.tokens
                    print(
                        f"round {rnd + 1} level {n:>2} {side.label:<40} {r['tok_s']:7.1f} tok/s"
                        f"  ITL p50 {r['itl_p50'] * 1e3:6.1f} ms"
                        + (f"  errors {r['errors']}: {r['first_error']}" if r["errors"] else "")
                        + (f"  only {r['output_tokens']} tokens" if short else ""),
                        flush=True,
                    )
        print_peer_tables(args, levels, live, sides, missing)
        if args.json:
            write_json(args.json, args.tokens, {s.name: (s.label, s.rounds) for s in live})
        print(f"\npeers section: {time.perf_counter() - started:.0f} s")
        if args.quality:
            for side in sides:
                if isinstance(side, ParleySide):
                    await side.aclose()
            served = {
                s.name: (s.label, s.peer.base_url, s.peer.model)
                for s in live
                if isinstance(s, PeerSide)
            }
            print("\n## quality: greedy agreement with parley fp32\n", flush=True)
            print(await quality_table(loaded, precisions, served, args.quality_tokens))
    finally:
        for side in sides:
            side.close()
            if isinstance(side, ParleySide):
                await side.aclose()


def write_json(
    path: Path, tokens: int, sides: dict[str, tuple[str, dict[int, list[dict[str, Any]]]]]
) -> None:
    """The throughput curve per side, for ``parley capacity --curve-json PATH``: per level the
    means of the rounds (tokens/s, ITL p50 and TTFT p50 in seconds)."""
    out: dict[str, Any] = {"source": "bench/engine.py", "output_tokens": tokens, "sides": {}}
    for name, (label, rounds) in sides.items():
        levels = {
            str(n): {
                k: sum(r[k] for r in rows) / len(rows) for k in ("tok_s", "itl_p50", "ttft_p50")
            }
            for n, rows in sorted(rounds.items())
            if rows
        }
        out["sides"][name] = {"label": label, "levels": levels}
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"curve written to {path}")


def print_peer_tables(
    args: argparse.Namespace,
    levels: list[int],
    live: list[Side],
    sides: list[Side],
    missing: dict[str, str],
) -> None:
    parley = [s for s in live if isinstance(s, ParleySide)]
    peers = [s for s in live if isinstance(s, PeerSide)]
    for label, why in missing.items():
        print(f"{label}: not available: {why}")
    for side in sides:
        if side.failed:
            print(f"{side.label}: not available: {side.failed}")
    header = " | ".join(s.label for s in live)
    rule = "|---" * (len(live) + 1) + "|"
    for title, key, scale, fmt in (
        ("tokens/s", "tok_s", 1.0, ".1f"),
        ("inter-token latency p50 ms", "itl_p50", 1e3, ".1f"),
        ("time to first token p50 ms", "ttft_p50", 1e3, ".0f"),
    ):
        print(f"\n## {title}, {args.tokens} output tokens (mean of rounds; rounds)\n")
        print(f"| concurrency | {header} |")
        print(rule)
        for n in levels:
            cells = [cell([r[key] * scale for r in s.rounds.get(n, [])], fmt) for s in live]
            print(f"| {n} | {' | '.join(cells)} |")
    if not parley or not peers:
        return
    print("\n## parley ÷ peer, tokens/s (means of the rounds; above 1: parley is faster)\n")
    print(f"| concurrency | parley | {' | '.join(s.label for s in peers)} |")
    print("|---|---" + "|---" * len(peers) + "|")
    for n in levels:
        for ps in parley:
            print(f"| {n} | {ps.label} | {ratios(ps, peers, n, 'tok_s')} |")
    low = min(levels)
    print(f"\n## parley ÷ peer, ITL p50 at concurrency {low} (below 1: parley is quicker)\n")
    print(f"| parley | {' | '.join(s.label for s in peers)} |")
    print("|---" + "|---" * len(peers) + "|")
    for ps in parley:
        print(f"| {ps.label} | {ratios(ps, peers, low, 'itl_p50')} |")
    goals(levels, parley, peers)


def ratios(ps: Side, peers: Seq[Side], level: int, key: str) -> str:
    """``ps`` ÷ each peer at ``level`` on ``key`` (table cells; "-" where one is missing)."""
    cells = []
    for peer in peers:
        a, b = mean_of(ps, level, key), mean_of(peer, level, key)
        cells.append(f"{a / b:.2f}" if a and b else "-")
    return " | ".join(cells)


def goals(levels: list[int], parley: Seq[Side], peers: Seq[Side]) -> None:
    """Issue 19's goals, met or not, from this run's means."""
    by = {s.name: s for s in [*parley, *peers]}
    pairs = [
        ("parley-fp32", "llama-f32"),
        ("parley-fp32", "vllm"),
        ("parley-int8", "llama-q8_0"),
        ("parley-w8a8", "llama-q8_0"),  # both round the product's inputs to 8 bits too
        ("parley-int4", "llama-q4_0"),
        ("parley-int4", "llama-q4_1"),
    ]
    print("\n## goals (parley ÷ peer tokens/s >= 1.0 at every level)\n")
    for ours, theirs in pairs:
        if ours not in by or theirs not in by:
            continue
        got = []
        for n in levels:
            a, b = mean_of(by[ours], n, "tok_s"), mean_of(by[theirs], n, "tok_s")
            got.append((n, a / b if a and b else 0.0))
        ok = all(r >= 1.0 for _, r in got)
        figures = ", ".join(f"{n}: {r:.2f}" for n, r in got)
        print(f"- {ours} vs {theirs}: {'met' if ok else 'NOT met'} ({figures})")
    if "parley-fp32" in by and "llama-f32" in by:
        low = min(levels)
        a, b = mean_of(by["parley-fp32"], low, "itl_p50"), mean_of(by["llama-f32"], low, "itl_p50")
        if a and b:
            verdict = "met" if a <= b else "NOT met"
            print(
                f"- ITL p50 at {low}, parley fp32 <= llama.cpp F32: {verdict}"
                f" ({a * 1e3:.1f} ms vs {b * 1e3:.1f} ms)"
            )


async def classic(args: argparse.Namespace, loaded: LoadedModel) -> None:
    print(f"model {loaded.name}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    base = baseline(loaded, args.baseline_requests, args.tokens)
    engine = BuiltinEngine(
        on_fresh_thread(lambda: load_model(None)), BuiltinEngineConfig(kv_cache_tokens=131_072)
    )
    levels = [int(x) for x in args.levels.split(",")]
    rows = {n: await concurrent(engine, n, args.tokens) for n in levels}
    if args.json and args.no_peers:  # (else the peers section wrote it)
        runs = {n: [{**r, "itl_p50": r["itl50"], "ttft_p50": r["ttft50"]}] for n, r in rows.items()}
        write_json(args.json, args.tokens, {"engine-classic": ("engine (classic)", runs)})
    prompt_len, cold, warm = await prefix_turn(engine)
    hits = engine.core.blocks.hit_rate
    await engine.close()
    steps = {n: (decode_step(loaded, n), floor_step(loaded, n)) for n in levels}

    print(f"\n## (a)+(b) throughput, {args.tokens} output tokens per request\n")
    print(
        "| serving | tokens/s | x baseline | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| transformers generate, {args.baseline_requests} requests in turn"
        f" | {base:.1f} | 1.0 | | | | |"
    )
    for n, r in rows.items():
        print(
            f"| engine, {n} concurrent | {r['tok_s']:.1f} | {r['tok_s'] / base:.1f} |"
            f" {r['ttft50'] * 1e3:.0f} | {r['ttft99'] * 1e3:.0f} |"
            f" {r['itl50'] * 1e3:.1f} | {r['itl99'] * 1e3:.1f} |"
        )
    print(f"\n## (c) next turn of a {prompt_len}-token conversation\n")
    print(
        f"TTFT cold {cold * 1e3:.0f} ms, warm (prefix cached) {warm * 1e3:.0f} ms:"
        f" warm/cold = {warm / cold:.2f} (prefix cache hit rate over the run {hits:.0%})"
    )
    print("\n## (d) one decode step vs. the floor (bare weight products)\n")
    print("| batch | engine step ms | floor ms | step / floor |")
    print("|---|---|---|---|")
    for n, (step, floor) in steps.items():
        print(f"| {n} | {step * 1e3:.1f} | {floor * 1e3:.1f} | {step / floor:.2f} |")
    r32 = rows.get(32)
    if r32:
        print(
            "\ntargets: 32 concurrent >= 10x baseline:"
            f" {r32['tok_s'] / base:.1f}x; decode step <= 2x floor at 32:"
            f" {steps[32][0] / steps[32][1]:.2f}x; warm TTFT <= 0.3x cold: {warm / cold:.2f}x"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--levels", default="1,8,32,64")
    parser.add_argument("--precisions", default="fp32,bf16,int8,int4,w8a8")
    parser.add_argument(
        "--peers",
        default=None,
        help=f"of {','.join(peer_servers.PEERS)}; default the llama ones (+ vllm if installed);"
        " '' for none",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="each peer's threads")
    parser.add_argument("--quick", action="store_true", help="max(level, 4) requests per level")
    parser.add_argument("--quality", action="store_true", help="add engine_quality's table")
    parser.add_argument("--quality-tokens", type=int, default=48)
    parser.add_argument("--classic", action="store_true", help="the sections (a)-(d) as well")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers section")
    parser.add_argument("--baseline-requests", type=int, default=32)
    parser.add_argument(
        "--json", type=Path, help="write each side's tokens/s, ITL and TTFT per level to PATH"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = on_fresh_thread(lambda: load_model(None))  # engines/builtin/threads.py
    if not args.no_peers:
        await peers_section(args, loaded)
    elif args.quality:
        precisions = [p for p in args.precisions.split(",") if p]
        print(await quality_table(loaded, precisions, None, args.quality_tokens))
    if args.classic:
        await classic(args, loaded)


if __name__ == "__main__":
    asyncio.run(main())
