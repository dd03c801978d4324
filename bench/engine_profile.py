"""Where one decode step of the built-in engine goes, by precision and batch (issue 19), and
what the hand-off from the engine thread to an async consumer adds to it.

    .venv/bin/python bench/engine_profile.py [--steps 20] [--batches 1,8,64]
        [--precisions fp32,bf16,int8,int4,w8a8] [--streams 1,8] [--main-thread]
        [--packed on|off|both]

Prints the CPU's flags and torch's thread counts, then for each precision a ``BuiltinEngine``
(bundled SmolLM2-135M) whose loop thread is not started yet: N sequences (short prompts, the
service's default sampling: temperature 0.7, top-p 1, EOS ignored so the batch stays at N)
are prefilled, warmed up, and decode steps run by this script on a thread of its own (as the
engine's loop thread; ``--main-thread``: on the main one), doing what ``EngineCore.step``
does call by call, timed with ``perf_counter``, medians over ``--steps``:
schedule (``Scheduler.schedule`` + ``computed``), layout (``ModelRunner.layout``), forward
(the model call; its CPU time over wall = cores busy), sample (``ModelRunner.sample`` +
``EngineCore._advance`` per sequence), deliver (``BuiltinEngine._deliver``: detokenize, stop
strings, deltas). Then, in separate passes over the same batch:

- the forward by part: ``attn.qkv``, ``attn.o_proj``, ``mlp.gate_up``, ``mlp.down``,
  ``lm_head`` and each layer's ``attn`` and ``mlp`` replaced on their objects by timing
  wrappers for that pass only; attention core (rope, KV write, block gather, SDPA) = attention
  minus its projections, SiLU * up = MLP minus its products;
- ``torch.profiler`` op self times around the forward alone, grouped (products: ``mm``,
  ``_weight_int8pack_mm``, ``_weight_int4pack_mm_for_cpu``, ``mkldnn::_linear_pointwise``;
  KV cache: ``index_select``, ``index_copy_``; SDPA; ``rms_norm``; the rest); Python between
  ops = the forward's wall time minus the sum of op self times; op calls a forward.

Last, per precision, the hand-off the step profile cannot see: the engine's loop thread runs
under an asyncio loop (uvloop where installed, as the service); 1 and 8 concurrent requests
stream (temperature 0.7, 64 tokens) and per token (each stream's first, with its prefill,
left out): (a) the step that made it (``core.last_step.seconds``), (b) the gap between
consecutive deltas as the consumer sees them, (c) the step's end on the engine thread → the
consumer's receipt (thread → event loop hop, GIL, ``_deliver``). p50s and (b) - (a) (the hop
plus the loop's own work between steps). A summary table ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any, TypeVar

import torch
from stacks import cpu, loop_runner, pct

from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.engine import DEFAULT_TEMPERATURE, BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, load_model
from parley.engines.builtin.native.mode import NativeMode
from parley.engines.builtin.precision import Precision
from parley.engines.builtin.sequence import Sequence, SequenceSampling
from parley.engines.builtin.threads import on_fresh_thread
from parley.engines.interface import ChatMessage, GenerationRequest
from parley.engines.sampling import SamplingParams

os.environ.setdefault("HF_HUB_OFFLINE", "1")

T = TypeVar("T")
PARTS = ("schedule", "layout", "forward", "sample", "deliver")
TOPICS = ("the sea", "mountains", "a city at night", "rain", "coffee", "old books", "trains")


def question(i: int) -> list[ChatMessage]:
    return [ChatMessage("user", f"Write a short paragraph about {TOPICS[i % len(TOPICS)]}. ({i})")]


# -- filling the engine ---------------------------------------------------------------------


def fill(engine: BuiltinEngine, batch: int, max_tokens: int) -> list[Sequence]:
    core = engine.core
    core.eos = set()  # no sequence ends early: the batch stays at `batch` for every step
    seqs = []
    for i in range(batch):
        params = SequenceSampling(max_tokens=max_tokens, temperature=DEFAULT_TEMPERATURE)
        seq = Sequence(f"p{batch}-{i}", engine.prompt_ids(question(i)), params)
        engine.output.add(seq)
        core.add(seq)
        seqs.append(seq)
    while any(s.in_prefill for s in seqs):  # prefill (in max_batch_tokens chunks)
        core.step()
    return seqs


# -- one decode step, timed call by call ---------------------------------------------------


def timed_step(engine: BuiltinEngine) -> dict[str, float]:
    """What EngineCore.step does for a decode-only plan, each part timed."""
    core: EngineCore = engine.core
    runner = core.runner
    t0 = time.perf_counter()
    plan = core.scheduler.schedule()
    t1 = time.perf_counter()
    assert not plan.too_long and plan.chunks and all(c.count == 1 for c in plan.chunks)
    layout, ids = runner.layout(plan.chunks)
    t2, c2 = time.perf_counter(), time.process_time()
    logits = runner.model(ids, layout, runner.kv_cache)
    t3, c3 = time.perf_counter(), time.process_time()
    for chunk in plan.chunks:
        core.scheduler.computed(chunk)
    t4 = time.perf_counter()
    seqs = [c.seq for c in plan.chunks]
    tokens, _ = runner.sample(logits, seqs)
    events = [core._advance(s, t, None) for s, t in zip(seqs, tokens, strict=True)]
    t5 = time.perf_counter()
    engine._deliver(events)
    t6 = time.perf_counter()
    return {
        "schedule": (t1 - t0) + (t4 - t3),
        "layout": t2 - t1,
        "forward": t3 - t2,
        "sample": t5 - t4,
        "deliver": t6 - t5,
        "total": t6 - t0,
        "forward_cpu": c3 - c2,
    }


def plain_step(engine: BuiltinEngine, around: AbstractContextManager[Any] | None = None) -> float:
    """One whole decode step; the forward's wall time (seconds), run inside ``around``."""
    core, runner = engine.core, engine.core.runner
    plan = core.scheduler.schedule()
    layout, ids = runner.layout(plan.chunks)
    with around or nullcontext():
        t = time.perf_counter()
        logits = runner.model(ids, layout, runner.kv_cache)
        took = time.perf_counter() - t
    for chunk in plan.chunks:
        core.scheduler.computed(chunk)
    seqs = [c.seq for c in plan.chunks]
    tokens, _ = runner.sample(logits, seqs)
    engine._deliver([core._advance(s, t, None) for s, t in zip(seqs, tokens, strict=True)])
    return took


# -- the forward by part (timing wrappers on the model's callables) ---------------------------


class PartTimer:
    """Replaces callables on objects by wrappers adding their wall time to ``totals[part]``."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.wrapped: list[tuple[object, str, Any]] = []

    def wrap(self, obj: object, attr: str) -> None:
        fn, totals = getattr(obj, attr), self.totals

        def timed(*args: Any) -> Any:
            t = time.perf_counter()
            out = fn(*args)
            totals[attr] += time.perf_counter() - t
            return out

        setattr(obj, attr, timed)
        self.wrapped.append((obj, attr, fn))

    def undo(self) -> None:
        for obj, attr, fn in reversed(self.wrapped):
            setattr(obj, attr, fn)  # the object's own callable back


def by_part(engine: BuiltinEngine, steps: int) -> tuple[float, dict[str, float]]:
    """(forward seconds with the wrappers, {part: seconds}), per step."""
    model = engine.core.model
    timer = PartTimer()
    for layer in model.layers:
        for obj, attrs in ((layer.attn, ("qkv", "o_proj")), (layer.mlp, ("gate_up", "down"))):
            for attr in attrs:
                timer.wrap(obj, attr)
        timer.wrap(layer, "attn")
        timer.wrap(layer, "mlp")
    timer.wrap(model, "lm_head")
    try:
        forward = sum(plain_step(engine) for _ in range(steps)) / steps
    finally:
        timer.undo()
    t = {k: v / steps for k, v in timer.totals.items()}
    parts = {
        "qkv projection": t["qkv"],
        "attention core (rope, KV write, block gather, SDPA)": t["attn"] - t["qkv"] - t["o_proj"],
        "o projection": t["o_proj"],
        "gate/up projection": t["gate_up"],
        "SiLU * up": t["mlp"] - t["gate_up"] - t["down"],
        "down projection": t["down"],
        "LM head": t["lm_head"],
    }
    parts["rest (embedding, RMSNorms, residuals, .float())"] = forward - sum(parts.values())
    return forward, parts


# -- the forward by op (torch.profiler) ---------------------------------------------------


PRODUCT_OPS = {
    "mm",
    "addmm",
    "_weight_int8pack_mm",
    "_weight_int4pack_mm_for_cpu",
    "mkldnn::_linear_pointwise",
}
KV_OPS = {"index_select", "index_copy_", "index_copy"}
OP_GROUPS = ("products", "KV cache", "SDPA", "rms_norm", "rest")


def op_group(name: str) -> str:
    op = name.removeprefix("aten::")
    if op in PRODUCT_OPS or name in PRODUCT_OPS:
        return "products"
    if op in KV_OPS:
        return "KV cache"
    if "scaled_dot_product" in name:
        return "SDPA"
    return "rms_norm" if "rms_norm" in name else "rest"


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null: kineto logs a line there as a profiler starts and stops
    (errors still come up as exceptions)."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def by_op(engine: BuiltinEngine, steps: int) -> tuple[float, dict[str, float], int, list[str]]:
    """(forward wall s, {group: op self s}, op calls, top ops), per step: the profiler is
    on around the forward alone."""
    from torch.profiler import ProfilerActivity, profile

    wall = 0.0
    self_us: dict[str, float] = defaultdict(float)
    calls = 0
    for _ in range(steps):
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=False)
        with quiet_stderr():
            wall += plain_step(engine, prof)
        for ev in prof.key_averages():
            self_us[ev.key] += ev.self_cpu_time_total
            calls += ev.count
    groups = dict.fromkeys(OP_GROUPS, 0.0)
    for name, us in self_us.items():
        groups[op_group(name)] += us / 1e6 / steps
    top = sorted(self_us.items(), key=lambda kv: -kv[1])[:6]
    return wall / steps, groups, calls // steps, [f"{k} {v / 1e3 / steps:.2f}" for k, v in top]


def profile_batch(engine: BuiltinEngine, batch: int, steps: int) -> dict[str, float]:
    seqs = fill(engine, batch, max_tokens=6 * steps + 20)
    for _ in range(3):  # warm-up decode steps
        timed_step(engine)
    samples = [timed_step(engine) for _ in range(steps)]
    med = {k: statistics.median([s[k] for s in samples]) for k in (*PARTS, "total")}
    cores = sum(s["forward_cpu"] for s in samples) / sum(s["forward"] for s in samples)
    total = sum(med[p] for p in PARTS)
    print(f"\n### batch {batch}: one decode step, median of {steps} steps\n")
    print("| part | ms | % |\n|---|---|---|")
    for p in PARTS:
        print(f"| {p} | {med[p] * 1e3:.2f} | {med[p] / total:.0%} |")
    print(f"| **step** (sum; median of totals {med['total'] * 1e3:.2f}) | {total * 1e3:.2f} |")
    print(
        f"\nforward CPU/wall = {cores:.2f} cores busy; outside the forward"
        f" {(total - med['forward']) * 1e3:.2f} ms; {batch / total:.1f} tok/s at this step time"
    )

    if engine.core.model.native is not None:  # one foreign call: no parts, no torch ops
        print("\n(the native decode step: one call a forward, no parts to time)")
        for seq in seqs:
            engine.core.abort(seq)
            engine.output.remove(seq.seq_id)
        return {"step": total, "forward": med["forward"], "sample": med["sample"]}
    fwd, parts = by_part(engine, steps)
    print(f"\nforward by part (wrapped callables; forward {fwd * 1e3:.2f} ms with the wrappers):\n")
    print("| forward part | ms | % of forward |\n|---|---|---|")
    for name, v in parts.items():
        print(f"| {name} | {v * 1e3:.2f} | {v / fwd:.0%} |")

    wall, groups, ops, top = by_op(engine, steps)
    between = wall - sum(groups.values())
    print(
        f"\ntorch.profiler: forward {wall * 1e3:.2f} ms under it, {ops} op calls a forward;"
        " op self ms: "
        + ", ".join(f"{g} {v * 1e3:.2f}" for g, v in groups.items())
        + f"; Python between ops {between * 1e3:.2f} ({between / wall:.0%},"
        f" {between / max(ops, 1) * 1e6:.1f} µs an op)"
    )
    print("top ops (self ms): " + ", ".join(top))
    for seq in seqs:  # the batch out again
        engine.core.abort(seq)
        engine.output.remove(seq.seq_id)
    return {"step": total, "forward": med["forward"], "sample": med["sample"]}


def on_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of its own, as the engine's steps run (EngineLoop). On a loaded
    machine the main thread's OpenMP team was seen to make small products several times slower."""
    with ThreadPoolExecutor(1, thread_name_prefix="profile") as pool:
        return pool.submit(fn).result()


# -- the hand-off: engine thread → event loop → async consumer ------------------------------


async def handoff(engine: BuiltinEngine, concurrency: int, tokens: int) -> dict[str, list[float]]:
    """Per token (each stream's first, with its prefill, left out): the step that made it,
    the gap since the stream's previous delta, and the step's end → the consumer's receipt."""
    core = engine.core
    ends: dict[tuple[str, int], tuple[float, float]] = {}
    step = core.step

    def recording_step() -> list[TokenEvent]:  # on the engine thread
        events = step()
        end = time.perf_counter()
        seconds = core.last_step.seconds if core.last_step else float("nan")
        for ev in events:
            if ev.token is not None:
                ends[(ev.seq.seq_id, len(ev.seq.output))] = (end, seconds)
        return events

    setattr(core, "step", recording_step)  # noqa: B010 (the loop thread looks it up each step)
    out: dict[str, list[float]] = {"step": [], "gap": [], "lag": []}

    async def consume(i: int) -> None:
        rid = f"h{concurrency}-{i}-{time.monotonic_ns()}"
        request = GenerationRequest(
            rid,
            engine.name,
            question(100 + i),
            max_tokens=tokens,
            sampling=SamplingParams(temperature=0.7),
        )
        n, last = 0, None
        async for delta in engine.stream(request):
            now = time.perf_counter()
            if not delta.tokens:
                continue
            n += delta.tokens
            if last is not None and (rid, n) in ends:
                end, seconds = ends[(rid, n)]
                out["step"].append(seconds)
                out["gap"].append(now - last)
                out["lag"].append(now - end)
            last = now

    try:
        await asyncio.gather(*(consume(i) for i in range(concurrency)))
    finally:
        del core.step  # the class's again
    return out


def run_handoff(engine: BuiltinEngine, levels: list[int], tokens: int) -> None:
    engine.core.eos = set()  # every stream gives `tokens` tokens

    async def run() -> list[dict[str, list[float]]]:
        try:
            return [await handoff(engine, c, tokens) for c in levels]
        finally:
            await engine.close()

    results = loop_runner()(run())
    n = sum(len(r["gap"]) for r in results)
    print(f"\n### hand-off: streams of {tokens} tokens, p50 ms over {n} tokens (temperature 0.7)\n")
    print("| streams | (a) step | (b) delta gap | (b) - (a) | (c) step end → consumer p50 / p90 |")
    print("|---|---|---|---|---|")
    for c, r in zip(levels, results, strict=True):
        a, b = pct(r["step"], 50) * 1e3, pct(r["gap"], 50) * 1e3
        lag50, lag90 = pct(r["lag"], 50) * 1e3, pct(r["lag"], 90) * 1e3
        print(f"| {c} | {a:.2f} | {b:.2f} | {b - a:.2f} | {lag50:.2f} / {lag90:.2f} |")


def cell(batch: int, s: dict[str, float]) -> str:
    ms = {k: f"{v * 1e3:.1f}" for k, v in s.items()}
    return f"{ms['step']} ({ms['forward']} / {ms['sample']}), {batch / s['step']:.0f} tok/s"


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--precisions", default="fp32,bf16", help="of fp32,bf16,int8,int4,w8a8")
    parser.add_argument("--streams", default="1,8", help="concurrent streams ('' for none)")
    parser.add_argument("--stream-tokens", type=int, default=64)
    parser.add_argument("--main-thread", action="store_true", help="step there, not on a thread")
    parser.add_argument(
        "--packed",
        choices=("on", "off", "both"),
        default="on",
        help="dense matrices packed for oneDNN (the engine's default), plain, or both side by side",
    )
    parser.add_argument(
        "--native",
        choices=("on", "off", "both"),
        default="on",
        help="decode steps in the native step where it serves the precision (the engine's "
        "default), in PyTorch, or both side by side",
    )
    args = parser.parse_args()
    precisions = [Precision(p.strip()) for p in args.precisions.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    levels = [int(x) for x in args.streams.split(",") if x.strip()]
    running = max(64, *batches)
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    loaded: LoadedModel = on_fresh_thread(lambda: load_model(None))  # builtin/threads.py
    print(f"CPU: {cpu()}")
    print(
        f"model {loaded.name}, torch {torch.__version__}, intra-op threads"
        f" {torch.get_num_threads()}, interop threads {torch.get_num_interop_threads()}"
    )
    print(f"the steps run on {'the main thread' if args.main_thread else 'a thread of their own'}")
    summary: dict[tuple[str, int], dict[str, float]] = {}
    packings = {"on": [True], "off": [False], "both": [True, False]}[args.packed]
    natives = {"on": [NativeMode.AUTO], "off": [NativeMode.OFF], "both": list(NativeMode)[::2]}
    variants = [
        (p, packed, native)
        for p in precisions
        for packed in packings
        for native in natives[args.native]
    ]
    for precision, packed, native in variants:
        label = (
            precision.value
            + ("" if packed else " plain")
            + (" torch" if native is NativeMode.OFF else "")
        )
        print(f"\n## precision {label}")
        config = BuiltinEngineConfig(
            kv_cache_tokens=65_536,
            max_running=running,
            precision=precision,
            packed_weights=packed,
            native_decode=native,
        )
        engine = BuiltinEngine(loaded, config)
        for batch in batches:
            run = partial(profile_batch, engine, batch, args.steps)
            summary[(label, batch)] = run() if args.main_thread else on_thread(run)
        if levels:
            run_handoff(engine, levels, args.stream_tokens)
    print("\n## summary: decode step ms (forward / sample), tok/s\n")
    print("| precision | " + " | ".join(f"batch {b}" for b in batches) + " |")
    print("|---|" + "---|" * len(batches))
    labels = list(dict.fromkeys(label for label, _ in summary))
    for label in labels:
        cells = [(b, summary[(label, b)]) for b in batches]
        print(f"| {label} | " + " | ".join(cell(b, s) for b, s in cells) + " |")
    print(f"\n(ran in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
