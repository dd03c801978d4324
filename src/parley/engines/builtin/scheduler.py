"""The scheduler: a step machine over waiting and running sequences.

Each ``schedule()`` builds one step's batch under a token budget:

1. every running sequence that is decoding gets one slot for its last token (a prompt
   whose chunk ended one token short has it already, and is fed that token now); when
   the KV cache is full, the lowest-ranked running sequence (lowest priority, then
   newest) is preempted: its blocks are freed and it goes back to waiting, to be
   recomputed later (its prompt and output so far are prefilled again, mostly from
   the prefix cache);
2. running sequences still prefilling get the next chunk of their prompt (chunked
   prefill: a long prompt never stalls the decoding of others for more than one chunk),
   but only those that outrank every waiting sequence;
3. waiting sequences are admitted by rank while blocks and budget last, reusing the
   longest cached prefix of their tokens;
4. the lower-ranked prefills take what budget is left. A long low-priority prompt (a
   background summary, a warm-up) thus never holds a user's new request out for the many
   steps its prefill takes: the request is admitted and prefilled first.

Background sequences (priority below 0: summaries, warm-ups) sit out every step in which a
user's sequence is prefilling or can be admitted: the user's first token then costs that
prefill alone, never a background decode or prefill chunk beside it. They run in the steps
between, beside the users' decodes, in prefill chunks of a quarter of the batch budget: a
user's request that arrives during such a step waits for a short one.

After the forward pass the engine calls ``computed()`` for every chunk, which lets
the block manager share the blocks just filled. ``finish()`` retires a sequence and
frees its blocks at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.engines.builtin.block_manager import BlockManager
from parley.engines.builtin.sequence import SeqStatus, Sequence

# a background sequence's prefill chunk is at most this fraction of the batch budget
BACKGROUND_CHUNK_DIVISOR = 4


@dataclass(frozen=True, slots=True)
class Chunk:
    """Feed ``tokens[start:start + count]`` of ``seq``; sample after it if ``sample``."""

    seq: Sequence
    start: int
    count: int
    sample: bool


@dataclass(slots=True)
class Schedule:
    chunks: list[Chunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    too_long: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.count for c in self.chunks)


class Scheduler:
    def __init__(
        self, blocks: BlockManager, *, max_batch_tokens: int = 512, max_running: int = 64
    ) -> None:
        self.blocks = blocks
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Retire a sequence (finished, stopped or aborted); its blocks are freed now."""
        if seq in self.running:
            self.running.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq.seq_id)
        seq.status = SeqStatus.FINISHED

    def schedule(self) -> Schedule:
        plan = Schedule()
        budget = self.max_batch_tokens
        quiet = self._user_prefilling()
        budget -= self._schedule_decodes(plan, budget, quiet)
        prefilling = [
            s
            for s in self.running
            if s.status is SeqStatus.RUNNING and s.in_prefill and not (quiet and s.background)
        ]
        best = min((seq.rank() for seq in self.waiting), default=None)
        ahead = [seq for seq in prefilling if best is None or seq.rank() < best]
        budget -= self._schedule_prefills(plan, budget, ahead)
        budget -= self._admit(plan, budget, quiet)
        behind = [seq for seq in prefilling if seq not in ahead and seq in self.running]
        self._schedule_prefills(plan, budget, behind)
        return plan

    def _user_prefilling(self) -> bool:
        """Whether a user's sequence (not background) is prefilling, or waits and fits the
        cache now: the steps background sequences sit out. (One that cannot fit does not
        hold them back: they may be what frees the blocks.)"""
        if any(s.in_prefill and not s.background for s in self.running):
            return True
        return any(not s.background and self.blocks.can_allocate(s.tokens) for s in self.waiting)

    def computed(self, chunk: Chunk) -> None:
        chunk.seq.num_computed = chunk.start + chunk.count
        self.blocks.mark_computed(chunk.seq.seq_id, chunk.seq.num_computed)

    # -- the three phases ------------------------------------------------------------------

    def _schedule_decodes(self, plan: Schedule, budget: int, quiet: bool) -> int:
        used = 0
        for seq in sorted(self.running, key=Sequence.rank):
            if used >= budget:
                break
            if seq.status is not SeqStatus.RUNNING or seq.in_prefill:
                continue
            if quiet and seq.background:
                continue
            if self.blocks.num_tokens(seq.seq_id) < seq.num_tokens:  # a new token: a slot
                if not self._make_room(seq, plan):
                    continue
                self.blocks.append_kv_slot(seq.seq_id, seq.tokens)
            # else a prompt whose last chunk the budget ended one token short: that token's
            # slot is in the table already, and this step feeds it like a decode
            plan.chunks.append(Chunk(seq, seq.num_tokens - 1, 1, sample=True))
            used += 1
        return used

    def _make_room(self, seq: Sequence, plan: Schedule) -> bool:
        """Preempt lower-ranked sequences until ``seq`` can take one more slot."""
        while not self.blocks.can_append(seq.seq_id):
            victim = max(self.running, key=Sequence.rank)
            self._preempt(victim, plan)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, plan: Schedule) -> None:
        self.running.remove(seq)
        plan.chunks[:] = [c for c in plan.chunks if c.seq is not seq]
        self.blocks.free(seq.seq_id)
        seq.num_computed = 0
        seq.preemptions += 1
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)
        plan.preempted.append(seq)

    def _schedule_prefills(self, plan: Schedule, budget: int, seqs: list[Sequence]) -> int:
        used = 0
        for seq in sorted(seqs, key=Sequence.rank):
            if used >= budget:
                break
            used += self._prefill_chunk(seq, plan, budget - used)
        return used

    def _prefill_chunk(self, seq: Sequence, plan: Schedule, budget: int) -> int:
        remaining = seq.num_tokens - seq.num_computed
        count = min(remaining, budget)
        if seq.background:  # short steps: a user's request arriving waits for one at most
            count = min(count, max(1, self.max_batch_tokens // BACKGROUND_CHUNK_DIVISOR))
        plan.chunks.append(Chunk(seq, seq.num_computed, count, sample=count == remaining))
        return count

    def _admit(self, plan: Schedule, budget: int, quiet: bool) -> int:
        """Admit waiting sequences by rank; the budget their first chunks used."""
        left = budget
        for seq in sorted(self.waiting, key=Sequence.rank):
            if left <= 0 or len(self.running) >= self.max_running:
                break
            if quiet and seq.background:
                break  # (ranked last: none after it is a user's)
            tokens = seq.tokens
            if not self.blocks.can_allocate(tokens):
                if not self.running and not plan.chunks:
                    self.waiting.remove(seq)  # it cannot fit even alone
                    plan.too_long.append(seq)
                    continue
                break  # strict rank order: wait for blocks to free up
            cached = self.blocks.allocate(seq.seq_id, tokens)
            seq.num_computed = cached
            if not seq.preemptions:
                seq.num_cached_prompt = cached
            seq.status = SeqStatus.RUNNING
            self.waiting.remove(seq)
            self.running.append(seq)
            left -= self._prefill_chunk(seq, plan, left)
        return budget - left
