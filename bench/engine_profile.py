"""Where one decode step of the built-in engine goes, at batch 1, 8 and 64 (issue 19).

    .venv/bin/python bench/engine_profile.py [--steps 20] [--batches 1,8,64]

The bundled SmolLM2-135M is loaded in-process into a ``BuiltinEngine`` whose loop thread is
never started: this script fills its ``EngineCore`` with N sequences (the prompts of
``bench/engine.py``, the service's default sampling: temperature 0.7, top-p 1), prefills
them, warms up, and then runs decode steps itself, doing what ``EngineCore.step`` does
call by call, timed with ``time.perf_counter``:

(a) schedule: ``Scheduler.schedule`` + ``Scheduler.computed`` (bookkeeping);
(b) layout: ``EngineCore._layout`` (block tables → slots, the BatchLayout tensors);
(c) forward: ``LlamaModel.forward``; its CPU time (``time.process_time``) over its wall time
    says how many cores its ops keep busy;
(d) sample: ``EngineCore._advance`` per sequence (``sample`` + the stop checks);
(e) deliver: ``BuiltinEngine._deliver`` (its ``OutputProcessor``: detokenize, stop strings,
    ``Delta``s; then into the streams' queues), which the service runs on the event loop
    after a ``call_soon_threadsafe`` hop (the hop itself is not measured here).

Then, in separate passes: module hooks time the forward by part (q/k/v/o projections, MLP,
attention over the paged KV = the attention module minus its projections, RMSNorms, LM
head, the rest), and ``torch.profiler`` (``record_shapes=False``) lists op self times;
forward wall minus the sum of op self times is the Python between ops. Finally the forward
at batch 1 with 1 and with 2 intra-op threads. Every table is a median over the steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from engine import question  # the prompts of bench/engine.py
from stacks import cpu
from torch import nn

from parley.engines.builtin.core import EngineCore, TokenEvent
from parley.engines.builtin.engine import DEFAULT_TEMPERATURE, BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import LoadedModel, load_model
from parley.engines.builtin.sequence import SamplingParams, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


PARTS = ("schedule", "layout", "forward", "sample", "deliver")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


# -- filling the engine ---------------------------------------------------------------------


def fill(engine: BuiltinEngine, batch: int, max_tokens: int) -> list[Sequence]:
    core = engine.core
    core.eos = set()  # no sequence ends early: the batch stays at `batch` for every step
    seqs = []
    for i in range(batch):
        messages = question(i)
        seq = Sequence(
            f"p{batch}-{i}",
            engine.prompt_ids(messages),
            SamplingParams(max_tokens=max_tokens, temperature=DEFAULT_TEMPERATURE),
        )
        engine.output.add(seq)
        core.add(seq)
        seqs.append(seq)
    while any(s.in_prefill for s in seqs):  # prefill (in max_batch_tokens chunks)
        core.step()
    return seqs


def drain(engine: BuiltinEngine, seqs: list[Sequence]) -> None:
    for seq in seqs:
        engine.core.abort(seq)
        engine.output.remove(seq.seq_id)


# -- one decode step, timed call by call ---------------------------------------------------


def timed_step(engine: BuiltinEngine) -> dict[str, float]:
    """What EngineCore.step does for a decode-only plan, each part timed."""
    core: EngineCore = engine.core
    t0 = time.perf_counter()
    plan = core.scheduler.schedule()
    t1 = time.perf_counter()
    assert not plan.too_long and plan.chunks and all(c.count == 1 for c in plan.chunks)
    layout, ids = core._layout(plan.chunks)
    t2 = time.perf_counter()
    c2 = time.process_time()
    logits = core.model(ids, layout, core.rotary, core.kv_cache)
    t3 = time.perf_counter()
    c3 = time.process_time()
    for chunk in plan.chunks:
        core.scheduler.computed(chunk)
    t4 = time.perf_counter()
    events: list[TokenEvent] = []
    row = 0
    for chunk in plan.chunks:
        if chunk.sample:
            events.append(core._advance(chunk.seq, logits[row]))
            row += 1
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


def forward_only(engine: BuiltinEngine) -> Callable[[], float]:
    """A closure running one decode step with the forward timed alone (seconds)."""

    def run() -> float:
        core = engine.core
        plan = core.scheduler.schedule()
        layout, ids = core._layout(plan.chunks)
        t = time.perf_counter()
        logits = core.model(ids, layout, core.rotary, core.kv_cache)
        took = time.perf_counter() - t
        for chunk in plan.chunks:
            core.scheduler.computed(chunk)
        events = [core._advance(c.seq, logits[i]) for i, c in enumerate(plan.chunks)]
        engine._deliver(events)
        return took

    return run


# -- the forward by module (hooks) --------------------------------------------------------


class ModuleTimer:
    """Wall time of chosen modules' forwards, by part name, via forward hooks."""

    def __init__(self, model: nn.Module) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._starts: dict[int, float] = {}
        self._handles: list[Any] = []
        for name, module in model.named_modules():
            part = self._part(name)
            if part is not None:
                self._hook(module, part)

    @staticmethod
    def _part(name: str) -> str | None:
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "k_proj", "v_proj", "o_proj"):
            return "qkvo_proj"
        if leaf == "self_attn":
            return "self_attn"
        if leaf == "mlp":
            return "mlp"
        if leaf in ("input_layernorm", "post_attention_layernorm", "norm"):
            return "rmsnorm"
        if leaf == "lm_head":
            return "lm_head"
        if leaf == "embed_tokens":
            return "embed"
        return None

    def _hook(self, module: nn.Module, part: str) -> None:
        key = id(module)

        def pre(_m: nn.Module, _a: Any) -> None:
            self._starts[key] = time.perf_counter()

        def post(_m: nn.Module, _a: Any, _o: Any) -> None:
            self.totals[part] += time.perf_counter() - self._starts[key]

        self._handles.append(module.register_forward_pre_hook(pre))
        self._handles.append(module.register_forward_hook(post))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def by_module(engine: BuiltinEngine, steps: int) -> dict[str, float]:
    """Per-step ms of the forward's parts (with the hooks' own cost inside)."""
    timer = ModuleTimer(engine.core.model)
    run = forward_only(engine)
    forward = 0.0
    try:
        for _ in range(steps):
            forward += run()
    finally:
        timer.remove()
    t = {k: v / steps for k, v in timer.totals.items()}
    parts = {
        "q/k/v/o projections": t.get("qkvo_proj", 0.0),
        "attention over paged KV (rotary, cache write, gather, SDPA)": t.get("self_attn", 0.0)
        - t.get("qkvo_proj", 0.0),
        "MLP (gate/up/down, SiLU)": t.get("mlp", 0.0),
        "RMSNorms": t.get("rmsnorm", 0.0),
        "LM head (+ .float())": t.get("lm_head", 0.0),
        "embedding": t.get("embed", 0.0),
    }
    parts["rest (residual adds, layer calls, hooks)"] = forward / steps - sum(parts.values())
    parts["forward (hooked)"] = forward / steps
    return parts


# -- the forward by op (torch.profiler) ---------------------------------------------------


def by_op(engine: BuiltinEngine, steps: int) -> tuple[float, float, int, list[tuple[str, float]]]:
    """(forward wall ms, sum of op self-CPU ms, op calls, top ops by self ms), per step: the
    profiler is on around the forward alone."""
    from torch.profiler import ProfilerActivity, profile

    core = engine.core
    wall = 0.0
    self_us: dict[str, float] = defaultdict(float)
    calls = 0
    for _ in range(steps):
        plan = core.scheduler.schedule()
        layout, ids = core._layout(plan.chunks)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            t = time.perf_counter()
            logits = core.model(ids, layout, core.rotary, core.kv_cache)
            wall += time.perf_counter() - t
        for ev in prof.key_averages():
            self_us[ev.key] += ev.self_cpu_time_total
            calls += ev.count
        for chunk in plan.chunks:
            core.scheduler.computed(chunk)
        engine._deliver([core._advance(c.seq, logits[i]) for i, c in enumerate(plan.chunks)])
    rows = sorted(((k, v / 1e3 / steps) for k, v in self_us.items()), key=lambda r: -r[1])
    total = sum(v for _, v in rows)
    return wall / steps * 1e3, total, calls // steps, rows[:8]


# -- main -------------------------------------------------------------------------------------


def threads_compare(engine: BuiltinEngine, steps: int) -> dict[int, float]:
    run = forward_only(engine)
    out = {}
    before = torch.get_num_threads()
    for n in (1, before):
        torch.set_num_threads(n)
        run()
        out[n] = median([run() for _ in range(steps)])
    torch.set_num_threads(before)
    return out


def profile_batch(loaded: LoadedModel, batch: int, steps: int) -> None:
    engine = BuiltinEngine(
        loaded,
        BuiltinEngineConfig(kv_cache_tokens=65_536, max_batch_tokens=512, max_running=64),
    )
    max_tokens = 10 * steps + 20
    seqs = fill(engine, batch, max_tokens)
    for _ in range(3):  # warm-up decode steps
        timed_step(engine)
    samples = [timed_step(engine) for _ in range(steps)]
    med = {k: median([s[k] for s in samples]) for k in (*PARTS, "total")}
    cores = sum(s["forward_cpu"] for s in samples) / sum(s["forward"] for s in samples)
    total = sum(med[p] for p in PARTS)
    print(f"\n## batch {batch}: one decode step, median of {steps} steps\n")
    print("| part | ms | % |")
    print("|---|---|---|")
    for p in PARTS:
        print(f"| {p} | {med[p] * 1e3:.2f} | {med[p] / total:.0%} |")
    print(
        f"| **step** (sum of medians; median total {med['total'] * 1e3:.2f}) |"
        f" {total * 1e3:.2f} | 100% |"
    )
    outside = total - med["forward"]
    print(
        f"\nforward CPU/wall = {cores:.2f} cores busy; Python outside the forward"
        f" {outside * 1e3:.2f} ms ({outside / total:.0%}); {batch / total:.1f} tok/s at this"
        " step time"
    )

    parts = by_module(engine, steps)
    fwd = parts.pop("forward (hooked)")
    print(f"\nforward by module (hooks, forward {fwd * 1e3:.2f} ms with the hooks' cost):\n")
    print("| forward part | ms | % of forward |")
    print("|---|---|---|")
    for name, v in parts.items():
        print(f"| {name} | {v * 1e3:.2f} | {v / fwd:.0%} |")

    wall, self_ms, ops, top = by_op(engine, steps)
    print(
        f"\ntorch.profiler (forward wall {wall:.2f} ms under the profiler): {ops} op calls a"
        f" step, op self time {self_ms:.2f} ms; Python between ops ≈ {wall - self_ms:.2f} ms"
        f" ({(wall - self_ms) / wall:.0%}), {(wall - self_ms) / max(ops, 1) * 1e3:.1f} µs an op"
    )
    print("top ops by self time (ms a step): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    if batch == 1:
        th = threads_compare(engine, steps)
        print(
            "\nforward at batch 1 by intra-op threads: "
            + ", ".join(f"{n} thread(s) {v * 1e3:.2f} ms" for n, v in th.items())
        )
    drain(engine, seqs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batches", default="1,8,64")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    loaded = load_model(None)
    print(f"CPU: {cpu()}")
    print(
        f"model {loaded.name}, torch {torch.__version__}, intra-op threads"
        f" {torch.get_num_threads()}, interop threads {torch.get_num_interop_threads()}"
    )
    for batch in (int(x) for x in args.batches.split(",")):
        profile_batch(loaded, batch, args.steps)
    print(f"\n(ran in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
