"""The paged KV-cache block manager: block tables, sharing, prefix caching, eviction."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from parley.engines.builtin.block_manager import (
    BlockHash,
    BlockManager,
    NoFreeBlocks,
    UnknownSequence,
    hash_block,
)

BS = 4


def toks(start: int, n: int) -> list[int]:
    """``n`` distinct-looking token ids starting at ``start``."""
    return list(range(start, start + n))


def computed(mgr: BlockManager, seq_id: str, token_ids: list[int]) -> int:
    """Allocate and pretend the forward pass computed the whole prompt."""
    cached = mgr.allocate(seq_id, token_ids)
    mgr.mark_computed(seq_id, len(token_ids))
    return cached


def probe(mgr: BlockManager, token_ids: list[int]) -> int:
    """How many tokens of this prompt are cached (allocates and frees a throwaway sequence)."""
    cached = mgr.allocate("probe", token_ids)
    mgr.free("probe")
    return cached


def state(mgr: BlockManager, seq_ids: list[str]) -> object:
    """Everything observable from outside, to compare before and after a failed call."""
    tables = {
        s: (mgr.block_table(s), mgr.num_tokens(s), mgr.num_computed_tokens(s)) for s in seq_ids
    }
    return (tables, mgr.num_free_blocks, mgr.num_cached_blocks, mgr.queries, mgr.hits)


# ----- construction and plain allocation ---------------------------------------------------


@pytest.mark.parametrize(("num_blocks", "block_size"), [(0, 4), (4, 0), (-1, 4)])
def test_rejects_non_positive_sizes(num_blocks: int, block_size: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        BlockManager(num_blocks, block_size)


def test_a_new_manager_has_every_block_free() -> None:
    mgr = BlockManager(8, BS)
    assert mgr.num_free_blocks == 8
    assert mgr.usage == 0.0
    assert mgr.num_cached_blocks == 0
    assert mgr.hit_rate == 0.0


def test_allocate_builds_a_table_of_distinct_blocks() -> None:
    mgr = BlockManager(8, BS)
    assert mgr.allocate("a", toks(0, 10)) == 0
    table = mgr.block_table("a")
    assert len(table) == 3
    assert len(set(table)) == 3
    assert mgr.num_tokens("a") == 10
    assert mgr.num_computed_tokens("a") == 0
    assert mgr.num_free_blocks == 5
    assert mgr.usage == pytest.approx(3 / 8)
    assert "a" in mgr
    mgr.check_invariants()


def test_slots_follow_the_block_table() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 10))
    table = mgr.block_table("a")
    for pos in range(10):
        assert mgr.kv_slot_of("a", pos) == table[pos // BS] * BS + pos % BS
    assert mgr.slots("a", 3, 6) == [mgr.kv_slot_of("a", p) for p in (3, 4, 5)]
    with pytest.raises(IndexError):
        mgr.kv_slot_of("a", 10)
    with pytest.raises(IndexError):
        mgr.kv_slot_of("a", -1)


def test_block_table_is_a_copy() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 5))
    mgr.block_table("a").append(99)
    assert len(mgr.block_table("a")) == 2


def test_allocate_rejects_empty_prompts_and_reused_ids() -> None:
    mgr = BlockManager(8, BS)
    with pytest.raises(ValueError, match="empty"):
        mgr.allocate("a", [])
    mgr.allocate("a", toks(0, 3))
    with pytest.raises(ValueError, match="already"):
        mgr.allocate("a", toks(0, 3))


def test_unknown_sequences() -> None:
    mgr = BlockManager(8, BS)
    for call in (mgr.block_table, mgr.num_tokens, mgr.num_computed_tokens, mgr.can_append):
        with pytest.raises(UnknownSequence):
            call("nope")
    with pytest.raises(KeyError):  # UnknownSequence is a KeyError
        mgr.append_kv_slot("nope", [1])
    mgr.free("nope")  # idempotent
    assert "nope" not in mgr


# ----- hashing -----------------------------------------------------------------------------


def test_block_hash_is_stable_and_chained() -> None:
    root = BlockHash(b"")
    first = hash_block(root, [1, 2, 3, 4])
    assert first == hash_block(root, (1, 2, 3, 4))
    assert len(first) == 16
    assert hash_block(root, [1, 2, 3, 5]) != first
    assert hash_block(first, [1, 2, 3, 4]) != first  # same tokens, another prefix
    assert hash_block(root, [2**40, 0]) != hash_block(root, [0, 2**40])


def test_equal_blocks_at_different_prefixes_are_not_shared() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", [1, 1, 1, 1, 2, 2, 2, 2, 9])
    # Block [2, 2, 2, 2] is cached, but after [1, 1, 1, 1], not as a first block.
    assert mgr.allocate("b", [2, 2, 2, 2, 9]) == 0


# ----- prefix sharing ----------------------------------------------------------------------


def test_blocks_are_not_shared_before_they_are_computed() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 9))
    assert mgr.allocate("b", toks(0, 9)) == 0
    assert not set(mgr.block_table("a")) & set(mgr.block_table("b"))


def test_mark_computed_registers_only_the_full_computed_blocks() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 10))
    mgr.mark_computed("a", 7)  # chunked prefill: block 0 full and computed, block 1 not
    assert mgr.num_cached_blocks == 1
    assert mgr.allocate("b", toks(0, 10)) == 4
    mgr.mark_computed("a", 10)
    assert mgr.num_cached_blocks == 2
    assert mgr.allocate("c", toks(0, 10)) == 8
    mgr.check_invariants()


def test_sequences_share_exactly_the_full_blocks_of_the_common_prefix() -> None:
    mgr = BlockManager(16, BS)
    computed(mgr, "a", toks(0, 14))
    prompt_b = [*toks(0, 10), 99, 98, 97]  # diverges inside block 2
    assert mgr.allocate("b", prompt_b) == 8
    a, b = mgr.block_table("a"), mgr.block_table("b")
    assert a[:2] == b[:2]
    assert not set(a[2:]) & set(b[2:])
    assert mgr.num_free_blocks == 16 - 4 - 2
    mgr.check_invariants()


def test_a_fully_cached_prompt_still_leaves_its_last_token_to_compute() -> None:
    mgr = BlockManager(16, BS)
    computed(mgr, "a", toks(0, 12))
    assert mgr.allocate("b", toks(0, 8)) == 4  # both blocks cached: reuse one, compute one
    assert mgr.allocate("c", toks(0, 9)) == 8
    assert mgr.allocate("d", toks(0, 4)) == 0
    assert mgr.block_table("b")[0] == mgr.block_table("a")[0]
    assert mgr.block_table("b")[1] != mgr.block_table("a")[1]


def test_a_recomputed_duplicate_block_stays_private() -> None:
    mgr = BlockManager(16, BS)
    computed(mgr, "a", toks(0, 8))
    assert computed(mgr, "b", toks(0, 8)) == 4  # b's second block duplicates a's
    assert mgr.num_cached_blocks == 2
    mgr.free("b")
    assert mgr.num_free_blocks == 16 - 2
    assert mgr.allocate("c", toks(0, 9)) == 8
    assert mgr.block_table("c")[:2] == mgr.block_table("a")[:2]
    mgr.check_invariants()


def test_freeing_one_sharer_leaves_the_other_intact() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", toks(0, 9))
    mgr.allocate("b", toks(0, 9))
    table_b = mgr.block_table("b")
    mgr.free("a")
    assert mgr.block_table("b") == table_b
    assert mgr.num_free_blocks == 8 - 3  # a's private last block is free again
    # Take every free block: none of b's may be handed out.
    mgr.allocate("c", toks(100, 5 * BS))
    assert not set(mgr.block_table("c")) & set(table_b)
    mgr.check_invariants()


def test_freed_blocks_are_reused_by_a_later_sequence_with_the_same_prefix() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", toks(0, 9))
    cached_ids = mgr.block_table("a")[:2]
    mgr.free("a")
    assert mgr.num_free_blocks == 8
    assert mgr.usage == 0.0
    assert mgr.allocate("b", toks(0, 9)) == 8
    assert mgr.block_table("b")[:2] == cached_ids
    assert mgr.num_free_blocks == 8 - 3  # the hits left the free list
    assert (mgr.queries, mgr.hits) == (18, 8)
    assert mgr.hit_rate == pytest.approx(8 / 18)
    mgr.reset_stats()
    assert (mgr.queries, mgr.hits, mgr.hit_rate) == (0, 0, 0.0)
    mgr.check_invariants()


def test_free_is_idempotent() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", toks(0, 9))
    mgr.free("a")
    mgr.free("a")
    assert mgr.num_free_blocks == 8
    assert "a" not in mgr
    mgr.check_invariants()


# ----- eviction ----------------------------------------------------------------------------


def test_empty_free_blocks_are_used_before_evicting_cached_ones() -> None:
    mgr = BlockManager(6, BS)
    computed(mgr, "a", toks(0, 8))
    mgr.free("a")  # two cached free blocks, four empty ones
    mgr.allocate("b", toks(100, 4 * BS))
    assert mgr.num_cached_blocks == 2
    mgr.free("b")
    assert mgr.allocate("c", toks(0, 9)) == 8


def test_eviction_takes_the_least_recently_freed_block_first() -> None:
    mgr = BlockManager(4, BS)
    computed(mgr, "a", toks(0, 4))
    computed(mgr, "b", toks(100, 4))
    computed(mgr, "c", toks(200, 4))
    mgr.free("b")
    mgr.free("a")
    mgr.free("c")  # LRU order: b, a, c (plus one empty block)
    mgr.allocate("x", toks(300, 2 * BS))  # the empty block, then b's
    assert mgr.num_cached_blocks == 2
    mgr.free("x")
    assert probe(mgr, toks(100, 5)) == 0
    assert probe(mgr, toks(0, 5)) == 4
    assert probe(mgr, toks(200, 5)) == 4


def test_a_hit_on_a_free_cached_block_renews_it() -> None:
    mgr = BlockManager(3, BS)
    computed(mgr, "a", toks(0, 4))
    computed(mgr, "b", toks(100, 4))
    mgr.free("a")
    mgr.free("b")  # LRU order: a, b
    mgr.allocate("a2", toks(0, 5))  # a's block is in use again, then freed last
    mgr.free("a2")  # LRU order: b, a (a2's private block went to the empty pool)
    mgr.allocate("x", toks(300, 2 * BS))  # the empty block, then b's
    mgr.free("x")
    assert probe(mgr, toks(100, 5)) == 0
    assert probe(mgr, toks(0, 5)) == 4


def test_a_sequence_is_evicted_tail_first() -> None:
    mgr = BlockManager(3, BS)
    computed(mgr, "a", toks(0, 12))
    mgr.free("a")
    mgr.allocate("x", toks(300, 1))  # evicts a's last block, keeping its prefix reachable
    mgr.free("x")
    assert mgr.num_cached_blocks == 2
    assert probe(mgr, toks(0, 12)) == 8


# ----- decode ------------------------------------------------------------------------------


def test_append_slot_fills_the_last_block_then_takes_a_new_one() -> None:
    mgr = BlockManager(4, BS)
    mgr.allocate("a", toks(0, 3))
    assert mgr.can_append("a")
    slot = mgr.append_kv_slot("a", toks(0, 4))
    assert slot == mgr.block_table("a")[0] * BS + 3
    assert len(mgr.block_table("a")) == 1
    slot = mgr.append_kv_slot("a", toks(0, 5))
    table = mgr.block_table("a")
    assert len(table) == 2
    assert slot == table[1] * BS
    assert mgr.num_tokens("a") == 5
    mgr.check_invariants()


def test_decoded_blocks_become_shareable_once_computed() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", toks(0, 3))
    mgr.append_kv_slot("a", toks(0, 4))
    mgr.append_kv_slot("a", toks(0, 5))
    assert mgr.num_cached_blocks == 0
    mgr.mark_computed("a", 5)
    assert mgr.num_cached_blocks == 1
    assert mgr.allocate("b", toks(0, 6)) == 4
    assert mgr.block_table("b")[0] == mgr.block_table("a")[0]


def test_append_without_a_free_block_fails_and_changes_nothing() -> None:
    mgr = BlockManager(1, BS)
    mgr.allocate("a", toks(0, 4))
    before = state(mgr, ["a"])
    assert not mgr.can_append("a")
    with pytest.raises(NoFreeBlocks):
        mgr.append_kv_slot("a", toks(0, 5))
    assert state(mgr, ["a"]) == before
    mgr.check_invariants()


def test_append_can_evict_a_cached_block() -> None:
    mgr = BlockManager(2, BS)
    computed(mgr, "a", toks(0, 4))
    mgr.free("a")
    computed(mgr, "b", toks(100, 4))  # takes the empty block
    assert mgr.can_append("b")
    mgr.append_kv_slot("b", [*toks(100, 4), 7])  # evicts a's block
    assert mgr.num_cached_blocks == 1
    assert not mgr.can_allocate(toks(0, 5))
    mgr.free("b")
    assert mgr.allocate("a2", toks(0, 5)) == 0  # a's block is gone


def test_appended_blocks_are_hashed_from_the_callers_tokens() -> None:
    mgr = BlockManager(8, BS)
    computed(mgr, "a", toks(0, 3))
    mgr.append_kv_slot("a", toks(0, 4))  # the block is full: hashed from these tokens
    mgr.mark_computed("a", 4)
    assert probe(mgr, [*toks(0, 4), 9]) == 4
    assert probe(mgr, [*toks(0, 3), 9, 9]) == 0


def test_append_slot_wants_the_sequences_tokens_and_the_new_one() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 3))
    before = state(mgr, ["a"])
    for wrong in (toks(0, 3), toks(0, 5), []):
        with pytest.raises(ValueError, match="append_kv_slot"):
            mgr.append_kv_slot("a", wrong)
    assert state(mgr, ["a"]) == before


def test_slots_map_a_range_of_positions() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 6))
    mgr.append_kv_slot("a", toks(0, 7))
    table = mgr.block_table("a")
    assert mgr.slots("a", 0, 7) == [table[p // BS] * BS + p % BS for p in range(7)]
    assert mgr.slots("a", 7, 7) == []
    for start, end in ((0, 8), (-1, 2), (3, 2)):
        with pytest.raises(IndexError):
            mgr.slots("a", start, end)
    with pytest.raises(UnknownSequence):
        mgr.slots("nope", 0, 1)


def test_mark_computed_rejects_counts_out_of_range() -> None:
    mgr = BlockManager(8, BS)
    mgr.allocate("a", toks(0, 6))
    mgr.mark_computed("a", 5)
    with pytest.raises(ValueError, match="computed tokens"):
        mgr.mark_computed("a", 7)
    with pytest.raises(ValueError, match="computed tokens"):
        mgr.mark_computed("a", 4)
    mgr.mark_computed("a", 5)  # repeating the same count is fine
    assert mgr.num_computed_tokens("a") == 5


# ----- allocation failure ------------------------------------------------------------------


def test_allocation_failure_changes_nothing() -> None:
    mgr = BlockManager(4, BS)
    computed(mgr, "a", toks(0, 9))
    before = state(mgr, ["a"])
    assert not mgr.can_allocate(toks(0, 8) + toks(100, 6))
    with pytest.raises(NoFreeBlocks):
        mgr.allocate("b", toks(0, 8) + toks(100, 6))
    assert state(mgr, ["a"]) == before
    assert "b" not in mgr
    mgr.check_invariants()


def test_cached_free_blocks_a_prompt_reuses_are_not_counted_twice() -> None:
    mgr = BlockManager(3, BS)
    computed(mgr, "a", toks(0, 9))
    mgr.free("a")  # two cached free blocks and one empty: three free
    prompt = toks(0, 8) + toks(100, 5)  # 4 blocks: 2 hits (taken from the free list) + 2 fresh
    before = state(mgr, [])
    assert not mgr.can_allocate(prompt)
    with pytest.raises(NoFreeBlocks):
        mgr.allocate("b", prompt)
    assert state(mgr, []) == before
    assert mgr.can_allocate(toks(0, 8) + toks(100, 4))
    assert mgr.allocate("b", toks(0, 8) + toks(100, 4)) == 8


# ----- randomized, against a reference model -----------------------------------------------


@dataclass
class Model:
    """The specification, written plainly: prefixes as token tuples, lists for queues.

    It does not pick block ids itself; it checks that every id the manager picks is a
    legal choice (an empty block if any is free, else the least recently freed cached one).
    """

    num_blocks: int
    block_size: int
    refs: list[int] = field(default_factory=list)
    prefix_of: dict[int, tuple[int, ...]] = field(default_factory=dict)  # registered blocks
    block_of: dict[tuple[int, ...], int] = field(default_factory=dict)
    empty: set[int] = field(default_factory=set)
    lru: list[int] = field(default_factory=list)  # free cached blocks, oldest first
    tables: dict[str, list[int]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    computed: dict[str, int] = field(default_factory=dict)
    offered: dict[str, int] = field(default_factory=dict)  # leading blocks offered to the cache
    queries: int = 0
    hits: int = 0

    def __post_init__(self) -> None:
        self.refs = [0] * self.num_blocks
        self.empty = set(range(self.num_blocks))

    def prefix(self, token_ids: list[int], num_blocks: int) -> tuple[int, ...]:
        return tuple(token_ids[: num_blocks * self.block_size])

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def expected_hits(self, token_ids: list[int]) -> list[int]:
        hits: list[int] = []
        for i in range((len(token_ids) - 1) // self.block_size):
            block = self.block_of.get(self.prefix(token_ids, i + 1))
            if block is None:
                break
            hits.append(block)
        return hits

    def can_allocate(self, token_ids: list[int]) -> bool:
        hits = self.expected_hits(token_ids)
        available = len(self.empty) + len(self.lru) - sum(1 for b in hits if b in self.lru)
        return available >= self.blocks_for(len(token_ids)) - len(hits)

    def take_fresh(self, block: int) -> None:
        if self.empty:
            assert block in self.empty, "an empty block must be used before evicting"
            self.empty.remove(block)
        else:
            assert self.lru, "no free block at all"
            assert block == self.lru[0], "eviction must take the least recently freed block"
            self.lru.pop(0)
            del self.block_of[self.prefix_of.pop(block)]
        self.refs[block] = 1

    def allocate(self, seq_id: str, token_ids: list[int], table: list[int], cached: int) -> None:
        hits = self.expected_hits(token_ids)
        assert cached == len(hits) * self.block_size
        assert table[: len(hits)] == hits
        assert len(table) == self.blocks_for(len(token_ids))
        for block in hits:
            if self.refs[block] == 0:
                self.lru.remove(block)
            self.refs[block] += 1
        for block in table[len(hits) :]:
            self.take_fresh(block)
        self.tables[seq_id] = list(table)
        self.tokens[seq_id] = list(token_ids)
        self.computed[seq_id] = cached
        self.offered[seq_id] = len(hits)
        self.queries += len(token_ids)
        self.hits += cached

    def needs_block(self, seq_id: str) -> bool:
        return len(self.tokens[seq_id]) == len(self.tables[seq_id]) * self.block_size

    def append(self, seq_id: str, token_id: int, table: list[int]) -> None:
        if self.needs_block(seq_id):
            assert table[:-1] == self.tables[seq_id]
            self.take_fresh(table[-1])
            self.tables[seq_id].append(table[-1])
        self.tokens[seq_id].append(token_id)

    def mark_computed(self, seq_id: str, num_tokens: int) -> None:
        self.computed[seq_id] = num_tokens
        token_ids, table = self.tokens[seq_id], self.tables[seq_id]
        num_full = num_tokens // self.block_size
        for i in range(self.offered[seq_id], num_full):
            prefix = self.prefix(token_ids, i + 1)
            if prefix not in self.block_of:  # else a duplicate: stays private for good
                self.block_of[prefix] = table[i]
                self.prefix_of[table[i]] = prefix
        self.offered[seq_id] = max(self.offered[seq_id], num_full)

    def free(self, seq_id: str) -> None:
        del self.tokens[seq_id], self.computed[seq_id], self.offered[seq_id]
        for block in reversed(self.tables.pop(seq_id)):
            self.refs[block] -= 1
            assert self.refs[block] >= 0
            if self.refs[block] == 0:
                if block in self.prefix_of:
                    self.lru.append(block)
                else:
                    self.empty.add(block)


class Harness:
    """Applies operations to a manager and the model, and compares them after each one."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.mgr = BlockManager(num_blocks, block_size)
        self.model = Model(num_blocks, block_size)
        self.next_id = 0

    @property
    def live(self) -> list[str]:
        return sorted(self.model.tables)

    def allocate(self, token_ids: list[int]) -> None:
        seq_id = f"s{self.next_id}"
        self.next_id += 1
        expect_ok = self.model.can_allocate(token_ids)
        assert self.mgr.can_allocate(token_ids) == expect_ok
        if not expect_ok:
            before = state(self.mgr, self.live)
            with pytest.raises(NoFreeBlocks):
                self.mgr.allocate(seq_id, token_ids)
            assert state(self.mgr, self.live) == before
            return
        cached = self.mgr.allocate(seq_id, token_ids)
        self.model.allocate(seq_id, token_ids, self.mgr.block_table(seq_id), cached)

    def append(self, seq_id: str, token_id: int) -> None:
        expect_ok = not self.model.needs_block(seq_id) or bool(self.model.empty or self.model.lru)
        assert self.mgr.can_append(seq_id) == expect_ok
        if not expect_ok:
            before = state(self.mgr, self.live)
            with pytest.raises(NoFreeBlocks):
                self.mgr.append_kv_slot(seq_id, [*self.model.tokens[seq_id], token_id])
            assert state(self.mgr, self.live) == before
            return
        slot = self.mgr.append_kv_slot(seq_id, [*self.model.tokens[seq_id], token_id])
        self.model.append(seq_id, token_id, self.mgr.block_table(seq_id))
        assert slot == self.mgr.kv_slot_of(seq_id, self.mgr.num_tokens(seq_id) - 1)

    def mark_computed(self, seq_id: str, fraction: float) -> None:
        low, high = self.model.computed[seq_id], len(self.model.tokens[seq_id])
        num_tokens = low + round((high - low) * fraction)
        self.mgr.mark_computed(seq_id, num_tokens)
        self.model.mark_computed(seq_id, num_tokens)

    def free(self, seq_id: str) -> None:
        self.mgr.free(seq_id)
        if seq_id in self.model.tables:
            self.model.free(seq_id)

    def check(self) -> None:
        mgr, model = self.mgr, self.model
        mgr.check_invariants()
        assert all(n >= 0 for n in model.refs)
        referenced: set[int] = set()
        for seq_id in self.live:
            table = mgr.block_table(seq_id)
            assert table == model.tables[seq_id]
            assert mgr.num_tokens(seq_id) == len(model.tokens[seq_id])
            assert mgr.num_computed_tokens(seq_id) == model.computed[seq_id]
            referenced.update(table)
        free = model.empty | set(model.lru)
        assert not referenced & free, "a referenced block is in the free list"
        assert len(referenced) + mgr.num_free_blocks == mgr.num_blocks
        assert mgr.num_free_blocks == len(free)
        assert mgr.num_cached_blocks == len(model.prefix_of)
        assert (mgr.queries, mgr.hits) == (model.queries, model.hits)
        self.check_sharing()

    def check_sharing(self) -> None:
        """A block in several tables sits at the same index after the same computed prefix."""
        holders: dict[int, list[tuple[str, int]]] = {}
        for seq_id, table in self.model.tables.items():
            for index, block in enumerate(table):
                holders.setdefault(block, []).append((seq_id, index))
        for block, where in holders.items():
            if len(where) < 2:
                continue
            prefixes = {self.model.prefix(self.model.tokens[s], i + 1) for s, i in where}
            assert len(prefixes) == 1, f"block {block} shared by different prefixes"
            assert all((i + 1) * self.mgr.block_size <= self.model.computed[s] for s, i in where)


BASES = [[0, 1, 2, 0, 1, 2, 0, 1], [1, 1, 1, 1, 1, 1], [2, 0, 2, 0, 2, 0, 2]]


def random_prompt(rng: random.Random, harness: Harness) -> list[int]:
    """Prompts from a few shared prefixes over a tiny vocabulary, so that caching matters."""
    sources = [*BASES, *harness.model.tokens.values()]
    base = rng.choice(sources)
    prompt = base[: rng.randint(0, len(base))]
    prompt += [rng.randrange(3) for _ in range(rng.randint(0 if prompt else 1, 5))]
    return prompt


def random_step(rng: random.Random, harness: Harness) -> None:
    live = harness.live
    op = rng.random()
    if not live or op < 0.3:
        harness.allocate(random_prompt(rng, harness))
    elif op < 0.6:
        harness.append(rng.choice(live), rng.randrange(3))
    elif op < 0.85:
        harness.mark_computed(rng.choice(live), rng.choice([0.0, 0.5, 1.0, 1.0]))
    else:
        harness.free(rng.choice([*live, "unknown"]))


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_match_the_model(seed: int) -> None:
    rng = random.Random(seed)
    harness = Harness(num_blocks=rng.randint(1, 12), block_size=rng.randint(1, 4))
    for _ in range(300):
        random_step(rng, harness)
        harness.check()
    for seq_id in harness.live:
        harness.free(seq_id)
        harness.check()
    assert harness.mgr.num_free_blocks == harness.mgr.num_blocks


prompts = st.lists(st.integers(0, 2), min_size=1, max_size=14)


class BlockManagerMachine(RuleBasedStateMachine):
    """The same model check, with hypothesis choosing (and shrinking) the operations."""

    harness: Harness

    @initialize(num_blocks=st.integers(1, 10), block_size=st.integers(1, 4))
    def setup(self, num_blocks: int, block_size: int) -> None:
        self.harness = Harness(num_blocks, block_size)

    @rule(token_ids=prompts)
    def allocate(self, token_ids: list[int]) -> None:
        self.harness.allocate(token_ids)

    @rule(data=st.data(), prefix_len=st.integers(0, 14), suffix=st.lists(st.integers(0, 2)))
    def allocate_sharing(self, data: st.DataObject, prefix_len: int, suffix: list[int]) -> None:
        sources = [*BASES, *self.harness.model.tokens.values()]
        prompt = data.draw(st.sampled_from(sources))[:prefix_len] + suffix
        if prompt:
            self.harness.allocate(prompt)

    @precondition(lambda self: bool(self.harness.live))
    @rule(data=st.data(), token_id=st.integers(0, 2))
    def append(self, data: st.DataObject, token_id: int) -> None:
        self.harness.append(data.draw(st.sampled_from(self.harness.live)), token_id)

    @precondition(lambda self: bool(self.harness.live))
    @rule(data=st.data(), fraction=st.sampled_from([0.0, 0.5, 1.0]))
    def mark_computed(self, data: st.DataObject, fraction: float) -> None:
        self.harness.mark_computed(data.draw(st.sampled_from(self.harness.live)), fraction)

    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        self.harness.free(data.draw(st.sampled_from([*self.harness.live, "unknown"])))

    @invariant()
    def consistent(self) -> None:
        self.harness.check()


BlockManagerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestBlockManagerMachine = BlockManagerMachine.TestCase
