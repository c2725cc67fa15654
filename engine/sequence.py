"""One generation stream: its tokens, its place in the KV cache, and its lifecycle."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

import torch

from engine.config import SamplingParams

_ids = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]
    params: SamplingParams
    index: int = 0  # which of the request's n outputs
    arrival_time: float = field(default_factory=time.time)
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: Status = Status.WAITING
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of full blocks, eager
    num_registered_blocks: int = 0  # leading blocks already in the prefix cache
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    generator: torch.Generator | None = None
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    num_preemptions: int = 0
    logprobs: list[dict[int, float]] = field(default_factory=list)
    pending_forks: int = 0  # children to fork when the first token is sampled (n > 1)
    draft_lag: int = 0  # computed tokens whose K/V the draft model has not written yet

    def __post_init__(self) -> None:
        if not self.num_prompt_tokens:
            self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_pending_tokens(self) -> int:
        """Tokens whose K/V still have to be computed before the next token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def fork(self, index: int) -> Sequence:
        """A sibling sharing everything computed so far; blocks are shared by the block manager."""
        child = Sequence(
            request_id=self.request_id,
            token_ids=list(self.token_ids),
            params=self.params,
            index=index,
            arrival_time=self.arrival_time,
            status=self.status,
            num_prompt_tokens=self.num_prompt_tokens,
            num_computed_tokens=self.num_computed_tokens,
            block_hashes=list(self.block_hashes),
            num_registered_blocks=self.num_registered_blocks,
            first_scheduled_time=self.first_scheduled_time,
            logprobs=list(self.logprobs),
            draft_lag=self.draft_lag,
        )
        if self.params.seed is not None:
            child.generator = torch.Generator().manual_seed(self.params.seed + index)
        return child
