"""The scheduler the simulator drives, one replica's worth: FCFS admission into the token budget, KV blocks
allocated as tokens are computed, preemption (recompute) of the newest request when blocks run out, and a
fast path for the decode-only stretches where nothing but the contexts changes.

The KV blocks themselves, and what a preempted request finds of them, are `KVPool`'s (kv_pool.py).

Tail term `whole-prompt admission` (vLLM 0.19 on, `scheduler_reserve_full_isl`, on by default; read in 0.19.0 and 0.32):
a waiting request, new or preempted, joins only when the blocks of its whole sequence so far are free (cached ones
count as free; a sliding group's at most its window and a step's tokens, and a block, less those before its cache
hit's window), not just those of its first chunk; nothing is reserved by it."""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import numpy as np

from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.kv_pool import KVPool
from llmbench.plan.sequence import Request
from llmbench.plan.step_jitter import JitterDraws


class StepModel(Protocol):
    """A step's seconds; for decode-only steps (prefill_tokens 0) context_tokens may be an array, one step each."""

    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float | np.ndarray,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0, prefill_pairs: float | None = None
                  ) -> float | np.ndarray: ...


class Scheduler(KVPool):
    """One replica's queue, running batch and KV blocks; `schedule` picks the next step's work."""

    def __init__(self, shape: EngineShape) -> None:
        super().__init__(shape)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.preemptions = 0
        self.reserved = 0  # blocks promised to admitted requests' future tokens (reserve_output)
        self.prefill_next = True  # decode_target: the last scheduler invocation did not prefill
        self.kv_floor = shape.prefill_kv_free * self.free  # prefill_kv_free: fewer free blocks hold new prompts back

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
                     speed: float = 1.0, jitter: JitterDraws | None = None) -> float | None:
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
        times = speed * np.asarray(model.step_time(0, batch, context + batch * np.arange(steps)), dtype=float)
        if jitter is not None:
            times = jitter.many(times)
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
        end = min(len(self.running), limit)  # this loop runs once per simulated token: no call it can spare
        while i < end and budget > 0:  # preemption pops from the end, so index forward
            r = self.running[i]
            todo = r.prompt + r.generated - r.computed
            n = cap if 0 < cap < todo else todo
            if n > budget:
                n = budget
            # a full-attention request holds no block beyond its tokens, so only a new block makes grow() do anything
            resize = self.blocks_for(r, n) if sliding else -(-(r.computed + n) // bs) > r.blocks
            if resize or (sliding and r.reserved):
                if not self.grow(r, n):
                    return batch
                end = min(len(self.running), limit)  # grow() may have preempted from the end
            batch.append((r, n))
            budget -= n
            i += 1
        if admit_new and self.shape.chunked_prefill and self.preemptions == before and not self._kv_held():
            self.admit(budget, batch)
        return batch
