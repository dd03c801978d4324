"""Paged KV-cache bookkeeping: block tables, reference counts and prefix caching.

The model owns one big K/V tensor of ``num_blocks * block_size`` slots; this module only
hands out block *ids* (in the style of vLLM v1's ``KVCacheManager``/``BlockPool`` and
nano-vllm's ``BlockManager``). A sequence's *block table* maps its token positions to
slots: position ``p`` lives in slot ``table[p // block_size] * block_size + p % block_size``
(``slots()``, the one owner of that map). It keeps no copy of a sequence's tokens: the
caller, which has the sequence, passes them to ``allocate`` and ``append_kv_slot``, and only
their count and the hashes of the full blocks stay here.

Prefix caching
--------------
Every *full* block of a sequence has a content hash chained on its parent's:
``hash(parent_hash, tokens_of_block)`` (BLAKE2b over a canonical byte encoding, so it is
stable across processes and equal blocks at different prefixes get different hashes). A
table maps hash -> block id for blocks whose K/V is known to be in the cache. A new
sequence walks its prompt's chain and reuses the blocks of the longest registered prefix
(at most ``(len(prompt) - 1) // block_size`` blocks, so at least one token is left to
compute and produce logits from); only full blocks are ever shared, so a shared block is
never written again.

When is a block registered?
---------------------------
Only after its K/V has really been computed: the scheduler calls
``mark_computed(seq_id, num_computed_tokens)`` after each forward pass, and the full blocks
covered by the computed tokens get registered then. ``allocate`` only *matches* already
registered blocks. (vLLM registers blocks when it schedules them, relying on the forward
writing every token's K/V before any attention reads them; registering after the forward
is the safer rule and costs at most one step of sharing.) If two sequences computed the
same block independently, the first one registered wins; the other copy stays private.

Free blocks and eviction
------------------------
A block whose reference count drops to zero is free. If it holds registered content it
stays in the cache, at the most-recently-used end of an LRU list, and is still found by
later prefix matches (which take it out of the free list again). When a fresh block is
needed, a free block without content is used first; only then is the least recently freed
cached block evicted (its hash unregistered). A sequence's blocks are freed tail first, so
its deeper blocks are evicted before the prefix blocks they chain on.

Every operation that can fail for lack of blocks checks first and raises ``NoFreeBlocks``
without changing any state.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NewType

BlockHash = NewType("BlockHash", bytes)

_ROOT = BlockHash(b"")  # parent of a sequence's first block; no real digest is empty
_DIGEST_SIZE = 16


class NoFreeBlocks(Exception):
    """Not enough free KV-cache blocks for the operation; nothing was changed."""


class UnknownSequence(KeyError):
    """The block manager holds no sequence with this id."""


def hash_block(parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
    """The chained content hash of one full block.

    The encoding is the parent digest (empty for the first block, 16 bytes otherwise)
    followed by each token id as a little-endian int64; blocks all have the same length,
    so the encoding is unambiguous.
    """
    h = hashlib.blake2b(parent, digest_size=_DIGEST_SIZE)
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return BlockHash(h.digest())


@dataclass(slots=True)
class _SeqState:
    block_ids: list[int]
    num_tokens: int  # the tokens themselves stay with the caller's sequence
    block_hashes: list[BlockHash]  # one per full block, in order
    num_computed: int  # tokens whose K/V the scheduler reported computed
    num_registered: int  # leading full blocks already offered to the prefix cache


class BlockManager:
    """Hands out KV-cache blocks to sequences, sharing computed full prefix blocks."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref_counts = [0] * num_blocks
        self._block_hash: list[BlockHash | None] = [None] * num_blocks
        self._cached: dict[BlockHash, int] = {}
        self._free_empty: deque[int] = deque(range(num_blocks))
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        self._seqs: dict[str, _SeqState] = {}
        self._queries = 0
        self._hits = 0

    # ----- sequences -------------------------------------------------------------------

    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        """Whether ``allocate`` of this prompt would succeed now."""
        hashes = self._full_block_hashes(_ROOT, token_ids)
        hits = self._match_prefix(hashes, len(token_ids))
        return self._fresh_blocks_available(hits) >= self._blocks_for(len(token_ids)) - len(hits)

    def allocate(self, seq_id: str, token_ids: Sequence[int]) -> int:
        """Build the block table of a new sequence's prompt; return its cached token count.

        Cached blocks of the longest registered prefix are shared, the rest are fresh. The
        returned count is a multiple of ``block_size`` and less than ``len(token_ids)``.
        """
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already has blocks")
        if not token_ids:
            raise ValueError("cannot allocate an empty prompt")
        hashes = self._full_block_hashes(_ROOT, token_ids)
        hits = self._match_prefix(hashes, len(token_ids))
        num_fresh = self._blocks_for(len(token_ids)) - len(hits)
        if self._fresh_blocks_available(hits) < num_fresh:
            raise NoFreeBlocks(f"{num_fresh} blocks needed for sequence {seq_id!r}")
        for block_id in hits:
            self._take(block_id)
        block_ids = hits + [self._take_fresh() for _ in range(num_fresh)]
        num_cached = len(hits) * self.block_size
        self._seqs[seq_id] = _SeqState(block_ids, len(token_ids), hashes, num_cached, len(hits))
        self._queries += len(token_ids)
        self._hits += num_cached
        return num_cached

    def can_append(self, seq_id: str) -> bool:
        """Whether ``append_kv_slot`` would succeed now."""
        return not self._needs_new_block(self._seq(seq_id)) or self.num_free_blocks > 0

    def append_kv_slot(self, seq_id: str, token_ids: Sequence[int]) -> int:
        """Add one token to a sequence (a new block if the last is full); return its slot.

        ``token_ids`` are all the sequence's tokens, the new one last (the caller owns them;
        this manager keeps only their count and the hashes of the full blocks).
        """
        seq = self._seq(seq_id)
        if len(token_ids) != seq.num_tokens + 1:
            raise ValueError(
                f"sequence {seq_id!r} holds {seq.num_tokens} tokens; append_kv_slot needs those "
                f"and the new one, got {len(token_ids)}"
            )
        if self._needs_new_block(seq):
            if self.num_free_blocks == 0:
                raise NoFreeBlocks(f"no block for the next token of sequence {seq_id!r}")
            seq.block_ids.append(self._take_fresh())
        seq.num_tokens += 1
        if seq.num_tokens % self.block_size == 0:
            parent = seq.block_hashes[-1] if seq.block_hashes else _ROOT
            seq.block_hashes.append(hash_block(parent, token_ids[-self.block_size :]))
        return self.kv_slot_of(seq_id, seq.num_tokens - 1)

    def mark_computed(self, seq_id: str, num_computed_tokens: int) -> None:
        """Record that the K/V of the sequence's first tokens are now in the cache.

        The scheduler calls this after each forward pass with the sequence's total
        computed token count; the full blocks it covers become shareable.
        """
        seq = self._seq(seq_id)
        if not seq.num_computed <= num_computed_tokens <= seq.num_tokens:
            raise ValueError(
                f"computed tokens of {seq_id!r} must be in "
                f"[{seq.num_computed}, {seq.num_tokens}], got {num_computed_tokens}"
            )
        seq.num_computed = num_computed_tokens
        num_full = num_computed_tokens // self.block_size
        for index in range(seq.num_registered, num_full):
            self._register(seq.block_hashes[index], seq.block_ids[index])
        seq.num_registered = max(seq.num_registered, num_full)

    def free(self, seq_id: str) -> None:
        """Release all of a sequence's blocks; a no-op for unknown ids."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return
        for block_id in reversed(seq.block_ids):  # tail first: evicted before its prefix
            self._release(block_id)

    # ----- lookups ---------------------------------------------------------------------

    def block_table(self, seq_id: str) -> list[int]:
        """A copy of the sequence's block ids, in position order."""
        return list(self._seq(seq_id).block_ids)

    def num_tokens(self, seq_id: str) -> int:
        return self._seq(seq_id).num_tokens

    def num_computed_tokens(self, seq_id: str) -> int:
        return self._seq(seq_id).num_computed

    def kv_slot_of(self, seq_id: str, position: int) -> int:
        """The cache slot of one token position of the sequence."""
        return self.slots(seq_id, position, position + 1)[0]

    def slots(self, seq_id: str, start: int, end: int) -> list[int]:
        """The cache slots of positions ``start .. end - 1`` of the sequence.

        The one place positions become slots (``slot = table[p // block_size] * block_size +
        p % block_size``): the engine lays out its batches with it.
        """
        seq = self._seq(seq_id)
        if not 0 <= start <= end <= seq.num_tokens:
            raise IndexError(
                f"positions {start}..{end - 1} out of range for sequence {seq_id!r} "
                f"of {seq.num_tokens} tokens"
            )
        size, table = self.block_size, seq.block_ids
        return [table[p // size] * size + p % size for p in range(start, end)]

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    # ----- stats -----------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence references (including cached ones that may be evicted)."""
        return len(self._free_empty) + len(self._free_cached)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose content is registered in the prefix cache (referenced or free)."""
        return len(self._cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by some sequence."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    @property
    def queries(self) -> int:
        """Prompt tokens looked up in the prefix cache (by successful ``allocate`` calls)."""
        return self._queries

    @property
    def hits(self) -> int:
        """Prompt tokens found in the prefix cache."""
        return self._hits

    @property
    def hit_rate(self) -> float:
        return self._hits / self._queries if self._queries else 0.0

    def reset_stats(self) -> None:
        self._queries = 0
        self._hits = 0

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if the bookkeeping is inconsistent (tests, debugging)."""
        refs = [0] * self.num_blocks
        for seq in self._seqs.values():
            _expect(len(seq.block_ids) == self._blocks_for(seq.num_tokens), "table size")
            _expect(len(seq.block_hashes) == seq.num_tokens // self.block_size, "hashes")
            _expect(len(set(seq.block_ids)) == len(seq.block_ids), "block twice in a table")
            for block_id in seq.block_ids:
                refs[block_id] += 1
        _expect(refs == self._ref_counts, "ref counts differ from the block tables")
        free = list(self._free_empty) + list(self._free_cached)
        _expect(len(set(free)) == len(free), "block twice in the free lists")
        _expect(set(free) == {b for b, n in enumerate(refs) if n == 0}, "free lists")
        _expect(all(self._block_hash[b] is None for b in self._free_empty), "empty holds hash")
        _expect(all(self._block_hash[b] is not None for b in self._free_cached), "cached lost")
        registered = {b: h for b, h in enumerate(self._block_hash) if h is not None}
        _expect(registered == {b: h for h, b in self._cached.items()}, "hash table")

    # ----- internals -------------------------------------------------------------------

    def _seq(self, seq_id: str) -> _SeqState:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise UnknownSequence(seq_id) from None

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _needs_new_block(self, seq: _SeqState) -> bool:
        return seq.num_tokens == len(seq.block_ids) * self.block_size

    def _full_block_hashes(self, parent: BlockHash, token_ids: Sequence[int]) -> list[BlockHash]:
        hashes: list[BlockHash] = []
        size = self.block_size
        for start in range(0, len(token_ids) - size + 1, size):
            parent = hash_block(parent, token_ids[start : start + size])
            hashes.append(parent)
        return hashes

    def _match_prefix(self, hashes: list[BlockHash], num_tokens: int) -> list[int]:
        """Block ids of the longest registered prefix, leaving at least one token out."""
        hits: list[int] = []
        for block_hash in hashes[: (num_tokens - 1) // self.block_size]:
            block_id = self._cached.get(block_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def _fresh_blocks_available(self, hits: list[int]) -> int:
        """Free blocks left for fresh allocation once ``hits`` are taken out of the cache."""
        hits_in_free_list = sum(1 for block_id in hits if self._ref_counts[block_id] == 0)
        return self.num_free_blocks - hits_in_free_list

    def _take(self, block_id: int) -> None:
        """Add a reference to a (possibly free) cached block."""
        if self._ref_counts[block_id] == 0:
            del self._free_cached[block_id]
        self._ref_counts[block_id] += 1

    def _take_fresh(self) -> int:
        """A block for new content: an empty one, else the LRU cached one (evicted)."""
        if self._free_empty:
            block_id = self._free_empty.popleft()
        else:
            block_id, _ = self._free_cached.popitem(last=False)
            self._unregister(block_id)
        self._ref_counts[block_id] = 1
        return block_id

    def _release(self, block_id: int) -> None:
        self._ref_counts[block_id] -= 1
        assert self._ref_counts[block_id] >= 0, f"block {block_id} released too often"
        if self._ref_counts[block_id] > 0:
            return
        if self._block_hash[block_id] is None:
            self._free_empty.append(block_id)
        else:
            self._free_cached[block_id] = None

    def _register(self, block_hash: BlockHash, block_id: int) -> None:
        if block_hash in self._cached or self._block_hash[block_id] is not None:
            return  # an identical block is already shared (or this one already is)
        self._cached[block_hash] = block_id
        self._block_hash[block_id] = block_hash

    def _unregister(self, block_id: int) -> None:
        block_hash = self._block_hash[block_id]
        if block_hash is not None:
            del self._cached[block_hash]
            self._block_hash[block_id] = None


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"block manager invariant broken: {what}")
