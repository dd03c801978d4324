"""The built-in engine on the bundled SmolLM2-135M, against transformers and the floor.

    python bench/engine.py [--tokens 64] [--baseline-requests 32]

One run, one table:
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
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import torch

from parley.engines.builtin.core import EngineCore
from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, default_model_path, load_model
from parley.engines.builtin.model import LlamaModel
from parley.engines.builtin.sequence import SamplingParams, Sequence
from parley.engines.interface import ChatMessage, GenerationRequest

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


async def concurrent(engine: BuiltinEngine, n: int, tokens: int) -> dict[str, float]:
    ttfts: list[float] = []
    gaps: list[float] = []
    produced = 0

    async def one(i: int) -> None:
        nonlocal produced
        req = GenerationRequest(
            f"b{n}-{i}-{uuid.uuid4().hex[:6]}", engine.name, question(i), tokens, temperature=0
        )
        start = last = time.perf_counter()
        first = True
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

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - start
    return {
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
        req = GenerationRequest(uuid.uuid4().hex, engine.name, messages, 1, temperature=0)
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
    model = LlamaModel(loaded.config)
    model.load_weights(loaded.weights)
    core = EngineCore(model.eval(), num_blocks=4096, block_size=16, max_batch_tokens=8192)
    ids = _ids(loaded)
    for i in range(batch):
        core.add(Sequence(f"d{i}", ids(question(i)), SamplingParams(max_tokens=steps + 4)))
    core.step()  # every prompt prefilled in one step
    times = []
    for _ in range(steps):
        core.step()
        assert core.last_step is not None and core.last_step.batch_sequences == batch
        times.append(core.last_step.seconds)
    return sorted(times)[len(times) // 2]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--baseline-requests", type=int, default=32)
    parser.add_argument("--levels", default="1,8,32,64")
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = load_model(None)
    print(f"model {loaded.name}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    base = baseline(loaded, args.baseline_requests, args.tokens)
    engine = BuiltinEngine(load_model(None), BuiltinEngineConfig(kv_cache_tokens=131_072))
    levels = [int(x) for x in args.levels.split(",")]
    rows = {n: await concurrent(engine, n, args.tokens) for n in levels}
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


if __name__ == "__main__":
    asyncio.run(main())
