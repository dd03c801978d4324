"""The plan as text: every input with its label, the KV arithmetic, the replica's limit and
why, the replica count, the waits, and Little's law per replica."""

from __future__ import annotations

from parley.capacity.kv import MIB, dtype_bits, human_bytes
from parley.capacity.plan import Given, Plan

SEED_GUESS = "~1 MB per token"  # what the design's seed guessed for Llama-3-70B


def _tag(given: Given | None) -> str:
    if given is None:
        return ""
    note = f", {given.note}" if given.note else ""
    return f"[{given.source}{note}]"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.1 else f"{seconds * 1000:,.1f} ms"


def render(plan: Plan) -> str:
    return "\n".join([*inputs(plan), "", *kv(plan), "", *replica(plan), "", *fleet(plan)])


def inputs(plan: Plan) -> list[str]:
    i = plan.inputs
    t, s, r, g = i.traffic, i.shape, i.replica, i.targets
    lines = ["inputs"]
    if t.rate is not None:
        lines.append(f"  arrival rate        {t.rate.value:,.3g} requests/s {_tag(t.rate)}")
    else:
        assert t.users and t.active_fraction and t.messages_per_minute
        lines += [
            f"  users               {t.users.value:,.0f} {_tag(t.users)}",
            f"  active at peak      {t.active_fraction.value:.1%} {_tag(t.active_fraction)}",
            f"  messages/min each   {t.messages_per_minute.value:g} {_tag(t.messages_per_minute)}",
            f"  → λ = {t.users.value:,.0f} x {t.active_fraction.value:g}"
            f" x {t.messages_per_minute.value:g} ÷ 60 = {plan.arrival_rate:,.3g} requests/s",
        ]
    lines += [
        f"  prompt tokens       {s.prompt_tokens.value:,.0f} {_tag(s.prompt_tokens)}",
        f"  output tokens       {s.output_tokens.value:,.0f} {_tag(s.output_tokens)}",
        f"  context held        {s.context:,.0f} tokens"
        + (f" {_tag(s.context_tokens)}" if s.context_tokens else " (prompt + output)"),
        f"  model               {r.model.name} [{r.model_source}, {r.model.note}]",
        "  KV memory           "
        + (
            f"{r.kv_memory_bytes.value / 1e9:,.4g} GB = {human_bytes(r.kv_memory_bytes.value)}"
            f" {_tag(r.kv_memory_bytes)}"
            if r.kv_memory_bytes
            else "not given"
        ),
        f"  throughput curve    {r.curve.origin}"
        f" [{'measured' if r.curve.measured else 'assumed'}]: "
        + ", ".join(f"{p.concurrency:g}→{p.tokens_per_s:,.0f}" for p in r.curve.points)
        + " tokens/s",
        f"  engine TTFT         {_ms(r.prefill_s.value)} {_tag(r.prefill_s)}",
        f"  service Cs², Ca²    {r.service_cv2.value:g} {_tag(r.service_cv2)},"
        f" {r.arrival_cv2.value:g} {_tag(r.arrival_cv2)}",
        f"  targets             TTFT {g.percentile} ≤ {_ms(g.ttft_s.value)},"
        f" ITL ≤ {_ms(g.itl_s.value)} [targets]",
    ]
    return lines


def kv(plan: Plan) -> list[str]:
    m = plan.inputs.replica.model
    per = plan.kv_bytes_per_token
    lines = [
        f"KV cache ({m.name}: {m.layers} layers, {m.kv_heads} KV heads, head dim {m.head_dim},"
        f" {m.kv_dtype}: {dtype_bits(m.kv_dtype) / 8:g} byte(s) an element)",
        f"  per token      2 x {m.layers} x {m.kv_heads} x {m.head_dim}"
        f" x {dtype_bits(m.kv_dtype) / 8:g} = {per:,} bytes = {human_bytes(per)}",
    ]
    if m.name == "llama-3-70b":
        lines.append(
            f"                 (the seed guessed {SEED_GUESS}: 1 MiB is {MIB / per:.1f}x this)"
        )
    ctx = plan.inputs.shape.context
    memory = plan.inputs.replica.kv_memory_bytes
    lines.append(
        f"  per sequence   {ctx:,.0f} tokens x {human_bytes(per)} = {human_bytes(ctx * per)}"
    )
    if memory is not None:
        full = m.context_length * per
        lines += [
            f"  per replica    {memory.value / 1e9:,.4g} GB holds {plan.by_memory:,} sequences"
            f" at {ctx:,.0f} tokens",
            f"                 {int(memory.value // full):,} at the model's full"
            f" {m.context_length:,}-token window ({human_bytes(full)} each)",
        ]
    return lines


def replica(plan: Plan) -> list[str]:
    r, g = plan.inputs.replica, plan.inputs.targets
    out = plan.inputs.shape.output_tokens.value
    mem = "not checked" if plan.by_memory is None else f"{plan.by_memory:,} sequences"
    verdict = (
        "the latency target, not memory, limits a replica"
        if plan.limit == "latency"
        else "KV memory, not the latency target, limits a replica"
    )
    return [
        "one replica",
        f"  by ITL ≤ {_ms(g.itl_s.value)}   {plan.by_latency:,} sequences",
        f"  by KV memory      {mem}",
        f"  → {plan.concurrency:,} sequences: {verdict}",
        f"  ITL at {plan.concurrency:,}: {_ms(plan.itl_s)}"
        f" ({r.curve.tokens_per_s(plan.concurrency):,.0f} tokens/s in all)",
        f"  service time S = {_ms(r.prefill_s.value)} + {max(0, out - 1):,.0f}"
        f" x {_ms(plan.itl_s)} = {plan.service_s:,.2f} s;"
        f" capacity {plan.concurrency / plan.service_s:,.3g} requests/s",
    ]


def fleet(plan: Plan) -> list[str]:
    q, g = plan.queue, plan.inputs.targets
    lines = [
        f"replicas: {plan.replicas:,} ({q.servers:,} sequence slots, {q.utilization:.0%} busy)",
        f"  queue wait (Erlang C x Allen-Cunneen (Ca² + Cs²)/2 = {q.variability:g}):"
        f" P(wait) {q.p_wait:.1%}, mean {_ms(q.mean_wait)},"
        f" p95 {_ms(q.wait_percentile(0.95))}, p99 {_ms(q.wait_percentile(0.99))}",
        f"  TTFT {g.percentile} = wait + engine TTFT = {_ms(plan.ttft_s)}"
        f" (target {_ms(g.ttft_s.value)})",
        f"  per replica: λ = {plan.per_replica_rate:,.3g} requests/s,"
        f" L = λW = {plan.per_replica_rate:,.3g} x {q.mean_wait + plan.service_s:,.2f} s"
        f" = {plan.in_system:,.1f} sequences (queued {plan.in_queue:,.2f})",
    ]
    if plan.replicas > 1:
        fewer = plan.replicas - 1
        lines.append(f"  with {fewer:,}: " + _fewer(plan, fewer))
    lines += [f"warning: {w}" for w in plan.warnings]
    return lines


def _fewer(plan: Plan, n: int) -> str:
    from parley.capacity.plan import wait_at
    from parley.capacity.queueing import Queue

    q = plan.queue
    smaller = Queue(q.arrival_rate, q.service_time, n * plan.concurrency, q.ca2, q.cs2)
    if not smaller.stable:
        return f"{smaller.utilization:.0%} busy: unstable, the queue grows without end"
    wait = wait_at(smaller, plan.inputs.targets.percentile)
    return (
        f"{smaller.utilization:.0%} busy, TTFT {plan.inputs.targets.percentile}"
        f" {_ms(wait + plan.inputs.replica.prefill_s.value)}: over the target"
    )
