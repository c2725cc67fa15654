"""Paged KV blocks: free list, reference counts, hash-chained prefix caching and copy-on-write.

Only full blocks are cached, keyed by a hash chained over every token before them, so a hit on block i
implies a hit on blocks 0..i-1. Free blocks sit in one LRU queue (an OrderedDict: O(1) removal from
the middle when a cached block is hit again); a freed block keeps its hash until it is reused, so a
later request can still hit it. Blocks are shared only when full and immutable, or after a fork
(n > 1); writing into a shared partial block first copies it (copy-on-write).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import xxhash

from engine.sequence import Sequence


def block_hash(parent: int | None, tokens: list[int]) -> int:
    h = xxhash.xxh64()
    if parent is not None:
        h.update(parent.to_bytes(8, "little"))
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.intdigest()


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None


@dataclass
class KVUsage:
    num_blocks: int
    used: int
    free: int
    cached: int  # blocks holding a prefix-cache entry, in use or free
    usage: float  # fraction of blocks in use (vllm:kv_cache_usage_perc)
    wasted_slots: int = 0  # allocated to the given sequences but holding no token
    live_seqs: int = 0


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 contiguous_len: int | None = None) -> None:
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.contiguous_blocks = math.ceil(contiguous_len / block_size) if contiguous_len else None
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # hash -> block id
        self.pending_copies: list[tuple[int, int]] = []  # (src, dst) for copy-on-write, drained per step

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def update_hashes(self, seq: Sequence) -> None:
        """Hash every newly full block of `seq` (eagerly, as tokens arrive)."""
        bs = self.block_size
        while len(seq.block_hashes) < seq.num_tokens // bs:
            i = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if i else None
            seq.block_hashes.append(block_hash(parent, seq.token_ids[i * bs : (i + 1) * bs]))

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids of the longest cached prefix; the last token is always left to compute."""
        if not self.enable_prefix_caching:
            return []
        hits = []
        for h in seq.block_hashes[: (seq.num_tokens - 1) // self.block_size]:
            block_id = self.cached.get(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def blocks_needed(self, seq: Sequence, num_new_tokens: int, lookahead: int = 0,
                      num_hit_blocks: int = 0) -> int:
        """New blocks an `allocate` call would take (including one for copy-on-write)."""
        if self.contiguous_blocks and not seq.block_table:
            return max(self.contiguous_blocks - num_hit_blocks, 0)
        have = len(seq.block_table) or num_hit_blocks
        start = seq.num_computed_tokens or num_hit_blocks * self.block_size
        want = math.ceil((start + num_new_tokens + lookahead) / self.block_size)
        return max(want - have, 0) + self._needs_copy(seq, start)

    def _needs_copy(self, seq: Sequence, start: int) -> int:
        idx = start // self.block_size
        return int(idx < len(seq.block_table) and self.blocks[seq.block_table[idx]].ref_count > 1)

    def can_allocate(self, seq: Sequence, num_new_tokens: int, lookahead: int = 0,
                     hit_blocks: list[int] | None = None) -> bool:
        needed = self.blocks_needed(seq, num_new_tokens, lookahead, len(hit_blocks or []))
        # hit blocks that sit in the free queue are taken out of it as well
        revived = sum(1 for b in hit_blocks or [] if self.blocks[b].ref_count == 0)
        return needed + revived <= len(self.free)

    def allocate(self, seq: Sequence, num_new_tokens: int, lookahead: int = 0,
                 hit_blocks: list[int] | None = None) -> bool:
        """Make room for `num_new_tokens` (+ lookahead) after the computed ones; False if it cannot."""
        if not self.can_allocate(seq, num_new_tokens, lookahead, hit_blocks):
            return False
        if hit_blocks and not seq.block_table:
            for block_id in hit_blocks:
                self._touch(block_id)
            seq.block_table = list(hit_blocks)
            seq.num_computed_tokens = len(hit_blocks) * self.block_size
            seq.num_registered_blocks = len(hit_blocks)
        if self._needs_copy(seq, seq.num_computed_tokens):
            idx = seq.num_computed_tokens // self.block_size
            src = seq.block_table[idx]
            dst = self._pop_free()
            self.blocks[src].ref_count -= 1
            seq.block_table[idx] = dst
            self.pending_copies.append((src, dst))
        if self.contiguous_blocks:
            want = max(self.contiguous_blocks, len(seq.block_table))
        else:
            want = math.ceil((seq.num_computed_tokens + num_new_tokens + lookahead) / self.block_size)
        while len(seq.block_table) < want:
            seq.block_table.append(self._pop_free())
        return True

    def register_computed(self, seq: Sequence) -> None:
        """Put the sequence's newly computed full blocks into the prefix cache."""
        if not self.enable_prefix_caching:
            return
        full = min(seq.num_computed_tokens // self.block_size, len(seq.block_hashes), len(seq.block_table))
        for i in range(seq.num_registered_blocks, full):
            block = self.blocks[seq.block_table[i]]
            h = seq.block_hashes[i]
            if block.hash is None:
                block.hash = h
                self.cached.setdefault(h, block.block_id)
        seq.num_registered_blocks = max(seq.num_registered_blocks, full)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        child.block_table = list(parent.block_table)
        for block_id in child.block_table:
            self.blocks[block_id].ref_count += 1

    def free_sequence(self, seq: Sequence) -> None:
        """Release the sequence's blocks, tail first so a prefix outlives its suffix in the LRU."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count < 0:
                raise RuntimeError(f"block {block_id} freed twice")
            if block.ref_count == 0:
                self.free[block_id] = None
                if block.hash is None:
                    self.free.move_to_end(block_id, last=False)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_registered_blocks = 0

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (vLLM's /reset_prefix_cache), so a benchmark's next run starts cold.
        Only while no block is in use, as vLLM does: False when a running sequence holds blocks."""
        if len(self.free) != self.num_blocks:
            return False
        for block in self.blocks:
            block.hash = None
        self.cached.clear()
        return True

    def take_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def usage(self, seqs: list[Sequence] = ()) -> KVUsage:
        """Block counts; with `seqs`, also the slots they hold without a token (internal waste)."""
        free = len(self.free)
        used = self.num_blocks - free
        slots = [len(s.block_table) * self.block_size for s in seqs]
        wasted = sum(n - min(s.num_tokens, n) for s, n in zip(seqs, slots, strict=True))
        return KVUsage(self.num_blocks, used, free, len(self.cached), used / self.num_blocks, wasted, len(seqs))

    def _touch(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:
            if self.cached.get(block.hash) == block_id:
                del self.cached[block.hash]
            block.hash = None
        block.ref_count = 1
        return block_id
