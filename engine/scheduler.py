"""Iteration-level scheduling: a token budget shared by decodes, chunked prefills and new requests.

Each step, running sequences go first (a decode costs one token plus any lookahead slots), then waiting
ones are admitted FCFS into whatever budget is left, the last of them chunked if chunked prefill is on.
When blocks run out, the newest running sequence is preempted by recompute: its blocks are freed and it
goes back to the front of the queue, where the prefix cache usually restores most of its work.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, Status


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)  # tokens computed this step, per sequence
    copies: list[tuple[int, int]] = field(default_factory=list)  # copy-on-write (src, dst) blocks
    num_preempted: int = 0
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)

    def __bool__(self) -> bool:
        return bool(self.seqs)


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, max_model_len: int) -> None:
        self.config = config
        self.bm = block_manager
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.bm.update_hashes(seq)
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.config.max_num_batched_tokens
        lookahead = self.config.num_lookahead_slots
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_pending_tokens, budget, self.max_model_len - seq.num_computed_tokens)
            if not self.config.enable_chunked_prefill and n < seq.num_pending_tokens:
                i += 1
                continue
            extra = lookahead if seq.num_computed_tokens >= seq.num_prompt_tokens else 0
            while not self.bm.allocate(seq, n, extra):
                victim = self.running[-1]
                self._preempt(victim)
                batch.num_preempted += 1
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue  # preempted itself; `running` shrank under it
            batch.seqs.append(seq)
            batch.num_tokens.append(n)
            budget -= n
            i += 1

        if not batch.num_preempted and self._may_admit():
            self._admit(batch, budget, lookahead)
        batch.copies = self.bm.take_copies()
        now = time.time()
        for seq in batch.seqs:
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
        return batch

    def _may_admit(self) -> bool:
        return self.config.batching == "continuous" or not self.running

    def _admit(self, batch: ScheduledBatch, budget: int, lookahead: int) -> None:
        """Move waiting sequences into the running set while budget, seats and blocks allow."""
        static = self.config.batching == "static"
        in_flight = {h for s in self.running for h in s.block_hashes[s.num_computed_tokens // self.bm.block_size:]}
        skipped: list[Sequence] = []
        while self.waiting and len(self.running) < self.config.max_num_seqs and (budget > 0 or static):
            seq = self.waiting[0]
            hits = self.bm.cached_prefix(seq)
            uncached = seq.block_hashes[len(hits):]
            if uncached and uncached[0] in in_flight and not static:
                # another request is computing this very prefix now: wait one step and hit the cache
                skipped.append(self.waiting.popleft())
                continue
            pending = seq.num_tokens - len(hits) * self.bm.block_size
            n = min(pending, budget)
            if not self.config.enable_chunked_prefill and n < pending and not (static and n == 0):
                break
            if not self.bm.allocate(seq, n, 0, hits):
                break
            self.waiting.popleft()
            batch.prefix_queried_tokens += seq.num_tokens
            batch.prefix_hit_tokens += len(hits) * self.bm.block_size
            seq.status = Status.RUNNING
            self.running.append(seq)
            in_flight.update(uncached)
            if n > 0:
                batch.seqs.append(seq)
                batch.num_tokens.append(n)
                budget -= n
        self.waiting.extendleft(reversed(skipped))

    def preempt(self, seq: Sequence) -> None:
        """Back to waiting, its blocks freed: recomputed from its tokens when admitted again."""
        self._preempt(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free_sequence(seq)
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        """Release a finished or aborted sequence wherever it is."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free_sequence(seq)
        seq.status = Status.FINISHED
