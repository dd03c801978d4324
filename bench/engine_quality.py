"""Greedy agreement of each engine precision (and optionally llama.cpp's GGUFs) with fp32.

    .venv/bin/python bench/engine_quality.py [--precisions fp32,bf16,int8,int4,w8a8] [--tokens 48]
        [--peers llama-f32,llama-q8_0,llama-q4_0,llama-q4_1]

For each precision parley's built-in engine (in-process, ``BuiltinEngine``, no HTTP) answers a
fixed set of 50 prompts greedily (temperature 0, at most ``--tokens`` tokens, stopping at the
end-of-turn token as usual). Each answer is compared with parley fp32's answer to the same
prompt: the share of prompts answered identically, the mean fraction of matching leading
tokens (common prefix ÷ the longer answer, both re-encoded with the model's tokenizer) and
whether the answer to "What is the capital of France?" contains "Paris". ``--peers`` adds
llama.cpp's ``llama-server`` on the bundled model requantized (bench/peers/peer_servers.py),
asked the same prompts over its OpenAI API at temperature 0 and compared with parley fp32 (and,
for the quantized files, with llama.cpp's own F32 answers when ``llama-f32`` is among them).
A precision that cannot be built yet prints "not available".

``quality_table()`` is the same for bench/engine.py ``--quality``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from openai_load import complete

from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, load_model
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import ChatMessage, GenerationRequest
from parley.engines.sampling import GREEDY

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FRANCE = "What is the capital of France?"
PROMPTS = [
    FRANCE,
    "What is the capital of Japan?",
    "How many days are there in a week?",
    "What is 12 plus 7?",
    "Name three primary colors.",
    "What is the boiling point of water in Celsius?",
    "Who wrote Romeo and Juliet?",
    "Translate 'good morning' into Spanish.",
    "What is the largest planet in the solar system?",
    "Give me a synonym for 'happy'.",
    "Write a haiku about autumn leaves.",
    "Explain what photosynthesis is in one sentence.",
    "List four fruits that are red.",
    "What does a thermometer measure?",
    "Write one sentence about a cat sleeping in the sun.",
    "What is the opposite of 'cold'?",
    "How many legs does a spider have?",
    "Suggest a name for a small bakery.",
    "What is the chemical symbol for gold?",
    "Describe the color blue to someone who cannot see.",
    "What is the square root of 81?",
    "Give two tips for better sleep.",
    "What language is spoken in Brazil?",
    "Write a short greeting for a birthday card.",
    "Why is the sky blue? Answer briefly.",
    "What is the freezing point of water in Fahrenheit?",
    "Name a famous painting by Leonardo da Vinci.",
    "Summarize the story of Cinderella in two sentences.",
    "What do bees make?",
    "Write a polite email subject line asking for a meeting.",
    "How many continents are there?",
    "What is the main ingredient of guacamole?",
    "Explain what a noun is.",
    "Give an example of a mammal that lives in the ocean.",
    "What is the past tense of 'run'?",
    "Write a two-line poem about the moon.",
    "What is the tallest mountain on Earth?",
    "Recommend a healthy breakfast.",
    "What is 5 times 6?",
    "Name the four seasons.",
    "What instrument has 88 keys?",
    "Write a sentence using the word 'river'.",
    "What gas do humans breathe out?",
    "Explain gravity to a child in one sentence.",
    "What is the currency of the United Kingdom?",
    "List three things you can find in a kitchen.",
    "Who painted the ceiling of the Sistine Chapel?",
    "What is a synonym for 'quick'?",
    "Write a one-sentence weather forecast for a sunny day.",
    "What is the smallest prime number?",
]
assert len(PROMPTS) == 50 and len(set(PROMPTS)) == 50


class NotAvailable(Exception):
    """This precision cannot be built (yet)."""


def kv_tokens(n: int, tokens: int) -> int:
    return max(16_384, n * (128 + tokens))


async def parley_answers(loaded: LoadedModel, precision: str, tokens: int) -> list[str]:
    """The engine's greedy answers to PROMPTS in that precision (all in flight at once)."""
    try:
        config = BuiltinEngineConfig(
            kv_cache_tokens=kv_tokens(len(PROMPTS), tokens), precision=Precision(precision)
        )
        engine = BuiltinEngine(loaded, config)
    except (NotImplementedError, ValueError) as exc:
        raise NotAvailable(f"{type(exc).__name__}: {exc}") from exc

    async def one(prompt: str) -> str:
        req = GenerationRequest(
            f"q-{uuid.uuid4().hex[:8]}",
            engine.name,
            [ChatMessage("user", prompt)],
            tokens,
            sampling=GREEDY,
        )
        return "".join([delta.text async for delta in engine.stream(req)])

    try:
        return list(await asyncio.gather(*(one(p) for p in PROMPTS)))
    except Exception as exc:  # an engine that builds but fails on its first step
        raise NotAvailable(f"{type(exc).__name__}: {exc}") from exc
    finally:
        await engine.close()


async def peer_answers(base_url: str, model: str, tokens: int, concurrency: int = 8) -> list[str]:
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> str:
        async with gate:
            return await complete(base_url, model, [{"role": "user", "content": prompt}], tokens)

    return list(await asyncio.gather(*(one(p) for p in PROMPTS)))


def agreement(loaded: LoadedModel, ref: list[str], other: list[str]) -> tuple[float, float]:
    """(share of identical answers, mean fraction of matching leading tokens)."""
    same = 0
    fractions = []
    for a, b in zip(ref, other, strict=True):
        ta, tb = loaded.tokenizer.encode(a), loaded.tokenizer.encode(b)
        same += ta == tb
        prefix = 0
        for x, y in zip(ta, tb, strict=False):
            if x != y:
                break
            prefix += 1
        fractions.append(prefix / max(len(ta), len(tb), 1))
    return same / len(ref), sum(fractions) / len(fractions)


async def quality_table(
    loaded: LoadedModel,
    precisions: list[str],
    peers: dict[str, tuple[str, str, str]] | None = None,
    tokens: int = 48,
) -> str:
    """The table: one row per precision (and per peer: name -> (label, base_url, model))."""
    answers: dict[str, list[str]] = {}
    missing: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for p in dict.fromkeys(["fp32", *precisions]):
        start = time.perf_counter()
        try:
            answers[f"parley {p}"] = await parley_answers(loaded, p, tokens)
        except NotAvailable as exc:
            missing[f"parley {p}"] = str(exc)
        seconds[f"parley {p}"] = time.perf_counter() - start
    labels = {}
    for name, (label, base_url, model) in (peers or {}).items():
        start = time.perf_counter()
        try:
            answers[name] = await peer_answers(base_url, model, tokens)
            labels[name] = label
        except Exception as exc:
            missing[name] = f"{type(exc).__name__}: {exc}"
        seconds[name] = time.perf_counter() - start
    ref = answers.get("parley fp32")
    france = PROMPTS.index(FRANCE)
    lines = [
        f"{len(PROMPTS)} prompts, greedy, at most {tokens} tokens; reference: parley fp32",
        "",
        "| answers of | identical to fp32 | matching leading tokens | vs llama.cpp F32:"
        " identical / leading | France answer has Paris | France answer | s |",
        "|---|---|---|---|---|---|---|",
    ]
    llama_ref = answers.get("llama-f32")
    for name in [*(f"parley {p}" for p in dict.fromkeys(["fp32", *precisions])), *(peers or {})]:
        shown = labels.get(name, name)
        if name not in answers:
            lines.append(f"| {shown} | not available | | | | {missing.get(name, '')[:120]} | |")
            continue
        got = answers[name]
        same, lead = agreement(loaded, ref, got) if ref else (float("nan"), float("nan"))
        vs_llama = ""
        if llama_ref is not None and name.startswith("llama-") and name != "llama-f32":
            s2, l2 = agreement(loaded, llama_ref, got)
            vs_llama = f"{s2:.0%} / {l2:.2f}"
        text = got[france].strip().replace("\n", " ").replace("|", "/")[:60]
        lines.append(
            f"| {shown} | {same:.0%} | {lead:.2f} | {vs_llama} |"
            f" {'yes' if 'Paris' in got[france] else 'NO'} | {text} | {seconds[name]:.0f} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--precisions", default="fp32,bf16,int8,int4,w8a8")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--peers", default="", help="e.g. llama-f32,llama-q8_0,llama-q4_0")
    args = parser.parse_args()
    import peer_servers

    loaded = on_fresh_thread(lambda: load_model(None))  # engines/builtin/threads.py
    names = [n for n in args.peers.split(",") if n]
    up, down = await peer_servers.start(names) if names else ({}, {})
    for name, why in down.items():
        print(f"{name}: not available: {why}")
    try:
        table = await quality_table(
            loaded,
            [p for p in args.precisions.split(",") if p],
            {n: (p.spec.label, p.base_url, p.model) for n, p in up.items()},
            args.tokens,
        )
    finally:
        for peer in up.values():
            peer.stop()
    print(table)


if __name__ == "__main__":
    asyncio.run(main())
