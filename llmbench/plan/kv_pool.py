"""The KV block pool of one simulated replica: the free blocks in vLLM's eviction order, the blocks each
request holds, and what a preempted request finds of its own when re-admitted. The scheduler is one (`Scheduler`
extends it); it decides when blocks are taken and given.

Tail term `cached preemption` (vLLM V1, prefix caching on; vllm/v1/core, read in 0.32): a preempted request's
blocks are freed, not wiped. Freed blocks join a pool in eviction order: full (hashed) blocks at its tail, a
preempted request's in reverse so its last blocks go first, a partial block at its head; every allocation takes
the head, evicting what it takes. Re-admitted, the request finds its surviving leading blocks in the prefix
cache (at most its tokens - 1) and computes only the rest. Elsewhere a preempted request recomputes all.

Tail term `hybrid KV groups` (vLLM V1's hybrid KV cache manager, on by default from 0.10; read in 0.32's
kv_cache_utils, single_type_kv_cache_manager and kv_cache_coordinator): a model with full and sliding-window layers
gets one block table per group of layers of one type, all drawn from one pool whose blocks each span one group's
layers (gpt-oss: one full and one sliding group, a pool of twice a full-attention model's blocks). A request holds
every block of its tokens in a full group, in a sliding group only those not wholly before its window (each
allocation first frees, cached, the blocks before max(0, computed - W + 1)). A re-admitted request's cache hit needs
the sliding group's last window of blocks too, and the blocks before it were freed earlier, so they are evicted
first: once any of a preempted request's blocks is evicted, it finds nothing (all or nothing). That is 0.10-0.22,
whose sliding groups cache every full block. Tail term `sparse window cache` (0.23 on; `reachable_block_mask`, the
default `prefix_cache_retention_interval` 0): a sliding group caches only the blocks a hit could end on, the
cdiv(W - 1, bs) before its prompt's last whole block, so a preempted request finds at most its prompt, while it holds
those blocks or, left behind by its window, until they are evicted; the rest have no hash, and vLLM's pool puts such
blocks at its head, reused first. From 0.26 (`shared_prefix_boundary`) a request re-admitted with only its full
group's blocks found pins their end, a junction whose tail its sliding group keeps too."""

from __future__ import annotations

from collections import deque

import numpy as np

from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.sequence import Request


class _Tail:
    """A run of the pool holding the cached sliding tail of request r's hit at block `end` (sparse window cache)."""

    __slots__ = ("r", "end")

    def __init__(self, r: Request, end: int) -> None:
        self.r, self.end = r, end

    def evict(self) -> None:
        self.r.tails[self.end] = False
        if self.r.kept == self.end:
            self.r.kept = 0


class KVPool:
    """One replica's KV blocks: how many are free, and under `cached preemption` the free ones in eviction order."""

    def __init__(self, shape: EngineShape) -> None:
        self.shape = shape
        self.free = shape.kv_capacity_tokens // shape.block_size * sum(shape.kv_groups) - shape.null_blocks
        # `cached preemption`: the free blocks in eviction order as [preempted owner or None, blocks]
        self.pool: deque[list] | None = deque([[None, self.free]]) if shape.keep_preempted else None

    def held(self, computed: int, upto: int) -> int:
        """Blocks a request holds to compute its tokens up to `upto` with `computed` computed: every group's blocks
        up to it, less a sliding group's wholly before the window (hybrid KV groups)."""
        n = -(-upto // self.shape.block_size)
        full, sliding = self.shape.kv_groups
        if not sliding:
            return n
        skipped = max(0, computed - self.shape.window + 1) // self.shape.block_size
        return full * n + sliding * (n - min(skipped, n))

    def blocks_for(self, r: Request, n: int) -> int:
        """More blocks r needs for n more tokens (negative: blocks its sliding groups give back)."""
        return self.held(r.computed, r.computed + n) - r.blocks

    def take(self, n: int) -> None:
        """n free blocks from the pool's head, evicting a preempted request's cached ones as it reaches them."""
        self.free -= n
        while self.pool is not None and n > 0:
            head = self.pool[0]
            k = min(n, head[1])
            head[1] -= k
            n -= k
            if isinstance(head[0], _Tail):
                head[0].evict()
                head[0] = None
            elif head[0] is not None and self.shape.kv_groups[1]:
                self._evict_hybrid(head, k)
            elif head[0] is not None:
                head[0].kept -= k
            if not head[1]:
                self.pool.popleft()

    def give(self, blocks: int) -> None:
        """Blocks a sliding group's window left behind back to the pool's tail, cached (hybrid KV groups); under
        `sparse window cache` uncached, to its head, where vLLM's pool puts a block without a hash."""
        self.free += blocks
        if self.pool is not None:
            if self.shape.sparse_window:
                self._join(self.pool.appendleft, 0, None, blocks)
            else:
                self._join(self.pool.append, -1, None, blocks)

    def release(self, r: Request, preempted: bool = False) -> None:
        """r's blocks back to the free pool: its full ones at the tail (kept for r when it was preempted), a
        partial one a group at the head."""
        self.free += r.blocks
        if self.pool is not None:
            whole = r.computed // self.shape.block_size
            partial = sum(self.shape.kv_groups) if r.computed % self.shape.block_size else 0
            full = min(whole, r.blocks) if not self.shape.kv_groups[1] else max(r.blocks - partial, 0)
            r.kept = min(whole, full) if preempted and full else 0
            r.cached_full = 0
            if self.shape.kv_groups[1] and self.shape.sparse_window:
                full = self._sparse_release(r, whole, full, preempted)
            if full:
                self._join(self.pool.append, -1, r if preempted else None, full)
            if r.blocks > full:
                self._join(self.pool.appendleft, 0, None, r.blocks - full)
        r.blocks = 0

    def _sparse_release(self, r: Request, whole: int, full: int, preempted: bool) -> int:
        """`sparse window cache`: of r's sliding blocks only a hit's tail (at its prompt's end or its junction) was
        cached; the rest go uncached to the pool's head. Returns r's cached blocks (its full groups' whole ones and
        that tail, freed sliding first) and sets preempted r's hit."""
        bs, (g_full, g_sliding) = self.shape.block_size, self.shape.kv_groups
        end = self._hit_at(r, (r.prompt - 1) // bs) or self._hit_at(r, r.junction)
        tail = g_sliding * -(-(self.shape.window - 1) // bs) if end else 0
        cached = min(whole * g_full + tail, full)
        r.kept = end if preempted and cached else 0
        if preempted and cached:
            r.cached_full, r.sliding_left = whole, tail
        return cached

    def _join(self, add, end: int, owner: Request | None, blocks: int) -> None:
        """Add a run of blocks at one end of the pool (`add`: append or appendleft; `end`: -1 or 0), merged with the
        run already there when neither is a preempted request's, so the pool stays a few runs long."""
        if owner is None and self.pool and self.pool[end][0] is None:
            self.pool[end][1] += blocks
        else:
            add([owner, blocks])

    def _evict_hybrid(self, head: list, k: int) -> None:
        """k blocks of preempted request head[0]'s run evicted (hybrid KV groups): its hit is gone with any of them
        (its sliding blocks go first); under `sparse window cache` with junctions its full group's leading blocks
        stay cached until the eviction reaches them, its last ones first, and the run stays its own until then."""
        r = head[0]
        r.kept = 0
        if self.shape.junction and r.cached_full:
            r.cached_full = max(0, r.cached_full - max(0, k - r.sliding_left))
            r.sliding_left = max(0, r.sliding_left - k)
        if not (self.shape.junction and r.cached_full):
            r.cached_full, head[0] = 0, None

    def _tail_ranges(self, r: Request) -> list[int]:
        """The hit ends whose sliding tails vLLM 0.32 caches for r: its prompt's end and its junction."""
        return [e for e in {(r.prompt - 1) // self.shape.block_size, r.junction} if e]

    def _skipped(self, r: Request) -> int:
        """Sliding blocks r's last allocation left behind (they are no longer among its blocks)."""
        bs, (g_full, g_sliding) = self.shape.block_size, self.shape.kv_groups
        n = -(-r.computed // bs)
        return n - (r.blocks - g_full * n) // g_sliding

    def _leave_tails(self, r: Request) -> int:
        """`sparse window cache`: the cached tail blocks (a hit's last cdiv(W - 1, bs)) that r's window leaves
        behind at this allocation go to the pool's tail, its own until evicted (vLLM frees a hashed block there);
        returns how many, which the allocation no longer nets against its new blocks."""
        bs, g_sliding = self.shape.block_size, self.shape.kv_groups[1]
        need = -(-(self.shape.window - 1) // bs)
        old, new = self._skipped(r), max(0, r.computed - self.shape.window + 1) // bs
        if new <= old:  # the window left no block behind (most steps)
            return 0
        left = 0
        for end in self._tail_ranges(r):
            k = g_sliding * max(0, min(new, end) - max(old, end - need))
            if k:
                r.tails[end] = True
                self.free += k
                r.blocks -= k
                self.pool.append([_Tail(r, end), k])
                left += k
        return left

    def _hit_at(self, r: Request, end: int) -> int:
        """Blocks preempted r can find under `sparse window cache` at a boundary its sliding group kept (its prompt's
        end, the replay boundary of its prompt - 1 tokens, or its junction): `end` if it computed them and still held
        the blocks a hit there needs, or left them behind cached and not yet evicted; else 0."""
        bs = self.shape.block_size
        held = self._skipped(r) <= end - -(-(self.shape.window - 1) // bs)
        return end if end and r.computed >= end * bs and (held or r.tails.get(end)) else 0

    def _readmitted(self, r: Request) -> None:
        """`sparse window cache`, r re-admitted: its left-behind tails are its hit or no longer its own; with no hit
        while its full group's blocks are still cached (vLLM 0.26+, `shared_prefix_boundary`) it pins their end, the
        longest one-group hit, so that its sliding group keeps the blocks a hit there needs as it computes past it
        again, and those old copies are no longer its own either."""
        pin = bool(r.cached_full and not r.kept and self.shape.junction)
        if pin:
            r.junction = r.cached_full
        for seg in self.pool:
            if (pin and seg[0] is r) or (isinstance(seg[0], _Tail) and seg[0].r is r):
                seg[0] = None
        r.tails = {}

    def _reclaim(self, r: Request, blocks: int) -> int:
        """Take `blocks` of preempted r's cached blocks out of the pool (as many as are left); any more of them are
        no longer r's. Returns how many it took."""
        for i, seg in enumerate(self.pool):
            if seg[0] is r:
                blocks = min(blocks, seg[1])
                seg[0], seg[1] = None, seg[1] - blocks
                if not seg[1]:
                    del self.pool[i]
                break
        self.free -= blocks
        r.kept = 0
        return blocks

    def _stretch(self, r: Request, steps: int) -> tuple[int, int] | None:
        """Hybrid KV groups over `steps` decodes of r: the blocks the steps take one by one and those its sliding
        groups give back (taken at the pool's head, given at its tail, or its head under `sparse window cache`, as
        stepping would); None while r's window
        has blocks still to give back from a step before (they go first, stepped)."""
        bs, window = self.shape.block_size, self.shape.window
        full, sliding = self.shape.kv_groups
        c = r.computed
        n = -(-c // bs)
        if n - (r.blocks - full * n) // sliding < max(0, c - window) // bs:
            return None
        if self.shape.sparse_window and self.pool is not None:  # a cached tail its window leaves behind: stepped
            need, last = -(-(window - 1) // bs), max(0, c + steps - window) // bs
            if any(end - need < last and self._skipped(r) < end for end in self._tail_ranges(r)):
                return None
        x = c + np.arange(steps)
        grows = x % bs == 0
        drops = np.maximum(0, x - window + 1) // bs - np.maximum(0, x - window) // bs
        return int(((full + sliding - sliding * drops) * grows).sum()), int((sliding * drops * ~grows).sum())
