"""One request's state inside the simulated engine (the scheduler's and the KV pool's view of it, as nano-vllm's
sequence.py is its engine's): its lengths, how far it has computed and generated, the blocks it holds, and what it
left cached when preempted."""

from __future__ import annotations

import math


class Request:
    """One request as the simulated engine holds it: its lengths, progress, blocks and what it left cached."""

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
