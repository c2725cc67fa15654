"""The scheduler the simulator drives, one replica's worth: FCFS admission into the token budget, KV blocks
allocated as tokens are computed, preemption (recompute) of the newest request when blocks run out, and a
fast path for the decode-only stretches where nothing but the contexts changes.

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
group's blocks found pins their end, a junction whose tail its sliding group keeps too.

Tail term `whole-prompt admission` (vLLM 0.19 on, `scheduler_reserve_full_isl`, on by default; read in 0.19.0 and 0.32):
a waiting request, new or preempted, joins only when the blocks of its whole sequence so far are free (cached ones
count as free; a sliding group's at most its window and a step's tokens, and a block, less those before its cache
hit's window), not just those of its first chunk; nothing is reserved by it."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StepModel(Protocol):
    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0, prefill_pairs: float | None = None
                  ) -> float: ...


@dataclass(frozen=True)
class EngineShape:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    kv_capacity_tokens: int = 10**7
    block_size: int = 16
    prefix_hit_rate: float = 0.0  # fraction of each prompt found in the prefix cache
    client_overhead: float = 0.0  # seconds added to TTFT and E2E (HTTP, tokenization)
    chunked_prefill: bool = True
    scheduler_steps: int = 1
    reserve_output: bool = False  # TensorRT-LLM's GUARANTEED_NO_EVICT: admit only with blocks for the whole output
    burst_ingest: float = 0.001  # seconds for a closed loop's request to reach the engine after the one before it
    ingest_cost: float = 0.0  # the API server's seconds a request (tail term `front-end ingest`; 0: none)
    ingest_parse_share: float = 0.0  # the share of them spent before it can be rendered (`front-end ingest`)
    whole_prompts: bool = False  # TensorRT-LLM without chunked context: a prompt joins a step only whole
    long_prefill_cap: int = 0  # vLLM's --long-prefill-token-threshold: one request's tokens a step (0: no cap)
    cap_lone_prefill: bool = True  # False from vLLM 0.31: a request alone in the scheduler is not capped
    # AMD's MLPerf patch of V0's scheduler (VLLM_LLAMA2_MLPERF_SCHED): (MAX, MIN, STEP, MIN_REQUIRE_PREFILL_GPU_BLOCK,
    # MIN_REQUIRE_PREFILL_QUERY); None: vLLM's own scheduler
    decode_target: tuple[int, int, int, int, int] | None = None
    # the ROCm fork's VLLM_SCHED_PREFILL_KVC_FREEPCT (MLPerf v4.1's Offline runs): a V0 invocation admits no new prompt
    # while fewer than this share of the KV blocks are free, checked where its _schedule_prefills is called: before
    # the decodes without chunked prefill, after them with it (0: no such rule)
    prefill_kv_free: float = 0.0
    keep_preempted: bool = False  # tail term `cached preemption`: a preempted request's blocks stay cached
    kv_groups: tuple[int, int] = (1, 0)  # tail term `hybrid KV groups`: (full-attention, sliding-window) groups
    window: int = 0  # the sliding groups' window in tokens (hybrid KV groups; 0: none)
    admit_whole: bool = False  # tail term `whole-prompt admission`: a waiting request's whole sequence must fit
    null_blocks: int = 0  # blocks the pool never hands out (vLLM V1's null block; 0 where a pool is thousands)
    sparse_window: bool = False  # tail term `sparse window cache`: a sliding group caches only its prompt's end
    junction: bool = False  # ... and the end of a re-admitted request's one-group hit (vLLM 0.26+)


class Request:
    __slots__ = ("arrival", "prompt", "output", "computed", "generated", "blocks", "first", "finish", "hit_done",
                 "delivered", "last_delivery", "reserved", "kept", "cached_full", "junction",
                 "sliding_left", "tails")

    def __init__(self, arrival: float, prompt: int, output: int) -> None:
        self.arrival, self.prompt, self.output = arrival, prompt, max(output, 1)
        self.computed = self.generated = self.blocks = self.delivered = self.reserved = 0
        self.kept = 0  # its own blocks still cached since it was preempted (`cached preemption`)
        # `sparse window cache`: its full group's blocks still cached, its junction, its sliding blocks before them
        self.cached_full = self.junction = self.sliding_left = 0
        self.tails: dict[int, bool] = {}  # hit ends whose cached sliding tail its window left behind: not yet evicted
        self.first = self.finish = self.last_delivery = math.nan
        self.hit_done = False

    @property
    def todo(self) -> int:
        """Tokens to compute before the next output token: the rest of the prompt, or one decode."""
        return self.prompt + self.generated - self.computed


class _Tail:
    """A run of the pool holding the cached sliding tail of request r's hit at block `end` (sparse window cache)."""

    __slots__ = ("r", "end")

    def __init__(self, r: Request, end: int) -> None:
        self.r, self.end = r, end

    def evict(self) -> None:
        self.r.tails[self.end] = False
        if self.r.kept == self.end:
            self.r.kept = 0


class Scheduler:
    """One replica's queue, running batch and KV blocks; `schedule` picks the next step's work."""

    def __init__(self, shape: EngineShape) -> None:
        self.shape = shape
        self.free = shape.kv_capacity_tokens // shape.block_size * sum(shape.kv_groups) - shape.null_blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.preemptions = 0
        self.reserved = 0  # blocks promised to admitted requests' future tokens (reserve_output)
        self.prefill_next = True  # decode_target: the last scheduler invocation did not prefill
        self.kv_floor = shape.prefill_kv_free * self.free  # prefill_kv_free: fewer free blocks hold new prompts back
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

    def grow(self, r: Request, n: int) -> bool:
        """Reserve blocks for n more tokens of running request r, preempting the newest ones; False when
        r itself was preempted."""
        need = self.blocks_for(r, n)
        if self.shape.sparse_window and self.shape.kv_groups[1] and self.pool is not None:
            need += self._leave_tails(r)
        if need < 0:
            self.give(-need)
            r.blocks += need
            return True
        if r.reserved:
            used = min(need, r.reserved)
            r.reserved -= used
            self.reserved -= used
        while need > self.free:
            victim = self.running.pop()
            self.release(victim, preempted=True)
            self.reserved -= victim.reserved
            victim.computed = victim.reserved = 0
            self.waiting.appendleft(victim)
            self.preemptions += 1
            if victim is r:
                return False
        self.take(need)
        r.blocks += need
        return True

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

    def _cached(self, r: Request) -> int:
        """Tokens of r already computed on admission: on its first one, the prefix-cache hit (whole blocks,
        the last prompt token always left to compute); after a preemption, its own blocks still cached."""
        shape = self.shape
        if r.kept:
            return min(r.kept, (r.prompt + r.generated - 1) // shape.block_size) * shape.block_size
        if r.hit_done or shape.prefix_hit_rate <= 0:
            return r.computed
        return min(int(r.prompt * shape.prefix_hit_rate) // shape.block_size * shape.block_size, r.prompt - 1)

    def _cap(self) -> int:
        """The most tokens one request computes a step under vLLM's --long-prefill-token-threshold (V1's
        scheduler, for running and waiting requests alike; 0: the budget's), so that a long prompt leaves room
        for others; from vLLM 0.31 a request alone in the scheduler has no one to leave room for."""
        shape = self.shape
        if not shape.cap_lone_prefill and len(self.running) + len(self.waiting) <= 1:
            return 0
        return shape.long_prefill_cap

    def _admission(self, r: Request, budget: int) -> tuple[int, int, int]:
        """Admitting r into `budget`: (tokens it computes, blocks it needs now, blocks that must be free,
        which with reserve_output cover its whole output)."""
        bs = self.shape.block_size
        computed, cap = self._cached(r), self._cap()
        todo = r.prompt + r.generated - computed
        n = min(cap if 0 < cap < todo else todo, budget)
        need = self.held(computed, computed + n) - r.blocks
        reserve = math.ceil((r.prompt + r.output) / bs) - r.blocks if self.shape.reserve_output else need
        return n, need, reserve

    def _whole(self, r: Request) -> int:
        """Blocks waiting r's whole sequence needs (`whole-prompt admission`): every group's up to its tokens, a
        sliding group's at most its window and a step's tokens (vLLM 0.32's admission cap), less those before the
        window of its cache hit."""
        bs = self.shape.block_size
        n = -(-(r.prompt + r.generated) // bs)
        full, sliding = self.shape.kv_groups
        cap = -(-(self.shape.window - 1 + self.shape.max_num_batched_tokens) // bs) + 1  # the window may start mid-block
        skipped = max(0, self._cached(r) - self.shape.window + 1) // bs if sliding else 0  # before a hit's window
        return full * n + sliding * max(min(n, cap) - skipped, 0) - r.blocks

    def _blocked(self, r: Request, n: int, reserve: int, budget: int, slack: int = 0) -> bool:
        """Whether waiting r stays out of this step: its blocks (or with whole-prompt admission its whole
        sequence's) are not free, even with `slack` more, or `whole_prompts` keeps it out."""
        room = self.free - self.reserved + slack
        if reserve > room or (self.shape.admit_whole and self._whole(r) > room):
            return True
        return self._cut(r, n, budget)

    def _cut(self, r: Request, n: int, budget: int) -> bool:
        """Whether `whole_prompts` keeps r out of a step that has `budget` tokens left: the rest of its prompt
        does not fit (a prompt longer than the whole budget still runs, in chunks, as it could not otherwise)."""
        if not self.shape.whole_prompts:
            return False
        rest = r.prompt + r.generated - self._cached(r)
        full = self.shape.max_num_batched_tokens
        return n < rest and (rest <= full or budget < full)

    def admit(self, budget: int, batch: list) -> int:
        """Waiting requests FCFS into the budget while their blocks fit."""
        while self.waiting and budget > 0 and len(self.running) < self.shape.max_num_seqs:
            r = self.waiting[0]
            n, need, reserve = self._admission(r, budget)
            if self._blocked(r, n, reserve, budget):
                break
            r.computed, r.hit_done = self._cached(r), True
            self.reserved += reserve - need
            r.reserved = reserve - need
            self.waiting.popleft()
            if r.cached_full or r.tails:
                self._readmitted(r)
            hit = self._reclaim(r, self.held(r.computed, r.computed)) if r.kept else 0
            r.cached_full = 0
            self.take(need - hit)
            r.blocks += need
            self.running.append(r)
            batch.append((r, n))
            budget -= n
        return budget

    def fast_forward(self, model: StepModel, now: float, next_arrival: float, bulk: list[np.ndarray],
                     speed: float = 1.0) -> float | None:
        """Run in one go the decode-only steps in which nothing but the contexts changes: every running request
        decodes, none finishes, no waiting one can join, no block runs short and no request arrives. These
        are most steps of a long-output workload; stepping them one by one costs a Python loop per token.
        `next_arrival` is also where the step-time factor `speed` may change. Returns the clock after them, None
        when there were none to run."""
        running, shape = self.running, self.shape
        batch = len(running)
        if not batch or batch > shape.max_num_batched_tokens or shape.decode_target is not None:
            return None
        budget = shape.max_num_batched_tokens - (batch if shape.chunked_prefill else 0)
        sliding = shape.kv_groups[1]
        if self.waiting and batch < shape.max_num_seqs and budget > 0 and not self._kv_held():
            n, _, reserve = self._admission(self.waiting[0], budget)
            if not self._blocked(self.waiting[0], n, reserve, budget, slack=sliding * batch):
                return None
        steps = min(r.output - r.generated for r in running) - 1
        if steps < 2 or any(r.todo != 1 or not r.generated or r.delivered != r.generated for r in running):
            return None
        moves = [self._stretch(r, steps) for r in running] if sliding else None
        if moves is not None and None in moves:
            return None
        need = sum(m[0] for m in moves) if moves else sum(self.blocks_for(r, steps) for r in running)
        if need > self.free:
            return None
        planned = steps  # the stretch checked; an arrival may cut it short
        context = sum(r.computed for r in running) + batch
        times = speed * np.array([model.step_time(0, batch, context + j * batch) for j in range(steps)])
        ends = now + np.cumsum(times)
        steps = min(steps, int(np.searchsorted(ends[:-1], next_arrival, side="left")) + 1)
        if steps < 2:
            return None
        first = np.array([ends[0] - r.last_delivery for r in running])  # a stalled request waited longer
        times = times[1:steps]
        now = float(ends[steps - 1])
        if moves and steps < planned:
            moves = [self._stretch(r, steps) for r in running]
        if moves and shape.sparse_window:  # uncached, at the pool's head: the steps' takes reuse them first
            self.give(sum(m[1] for m in moves))
        for i, r in enumerate(running):
            if moves:
                self.take(moves[i][0])
                r.blocks += moves[i][0] - moves[i][1]
            else:
                self.grow(r, steps)  # the blocks are there (checked above): no preemption
            r.computed += steps
            r.generated += steps
            r.delivered, r.last_delivery = r.generated, now
        if moves and not shape.sparse_window:
            self.give(sum(m[1] for m in moves))
        bulk += [first, np.repeat(times, batch)]
        return now

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

    def _may_prefill(self) -> bool:
        """AMD's MLPerf patch (`decode_target`): a scheduler invocation prefills only below MAX running, with more
        than the set number of free blocks, and with enough waiting queries unless the invocation before it did
        not prefill; an idle engine's empty invocation is followed at once by the next."""
        top, _, _, blocks, queries = self.shape.decode_target
        for _ in range(1 if self.running else 2):
            ok = len(self.running) < top and self.free > blocks and (len(self.waiting) >= queries or self.prefill_next)
            self.prefill_next = not ok
            if ok:
                return True
        return False

    def _kv_held(self) -> bool:
        """`prefill_kv_free`: the share of free KV blocks is below the rule's, so no new prompt joins (free blocks
        only fall while nothing finishes)."""
        return self.free < self.kv_floor

    def _decode_limit(self) -> int:
        """How many running requests a step decodes: all, or under `decode_target` T(n) of the n running (MAX
        from MAX on, a multiple of STEP from MIN on, else MIN), taken from the front of the queue."""
        n = len(self.running)
        if self.shape.decode_target is None:
            return n
        top, low, step = self.shape.decode_target[:3]
        return top if n >= top else n // step * step if n >= low else low

    def schedule(self, admit_new: bool) -> list[tuple[Request, int]]:
        budget = self.shape.max_num_batched_tokens
        batch: list[tuple[Request, int]] = []
        if not self.shape.chunked_prefill:
            if admit_new and self.shape.decode_target is not None:
                admit_new = self._may_prefill()
            admit_new = admit_new and not self._kv_held()
            prefilling = [r for r in self.running if r.computed < r.prompt]
            if prefilling or (admit_new and self.waiting):
                for r in prefilling:
                    n = min(r.todo, budget)
                    if n > 0 and self.grow(r, n):
                        batch.append((r, n))
                        budget -= n
                if admit_new:
                    self.admit(budget, batch)
                if batch:
                    return batch
        before = self.preemptions
        i, bs, cap, limit = 0, self.shape.block_size, self._cap(), self._decode_limit()
        sliding = self.shape.kv_groups[1]
        while i < min(len(self.running), limit) and budget > 0:  # preemption pops from the end, so index forward
            r = self.running[i]
            todo = r.prompt + r.generated - r.computed
            n = min(cap if 0 < cap < todo else todo, budget)
            resize = self.blocks_for(r, n) if sliding else -(-(r.computed + n) // bs) > r.blocks
            if (resize or r.reserved) and not self.grow(r, n):
                return batch
            batch.append((r, n))
            budget -= n
            i += 1
        if admit_new and self.shape.chunked_prefill and self.preemptions == before and not self._kv_held():
            self.admit(budget, batch)
        return batch
