"""Workload datasets: each turns its source into `Request`s with lengths in the target's tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmbench.datasets.sharegpt import DatasetError


@dataclass
class Request:
    prompt: str | None  # for /v1/completions
    prompt_len: int
    output_len: int
    messages: list[dict] | None = None  # for /v1/chat/completions
    timestamp: float | None = None  # trace replay: seconds from the start
    conversation_id: str | None = None
    turn: int = 0
    follow_ups: list[str] = field(default_factory=list)  # multi-turn: later user turns
    follow_up_output_lens: list[int] = field(default_factory=list)
    follow_up_at: list[float] = field(default_factory=list)  # a trace's session: each later turn's own timestamp
    follow_ups_whole: bool = False  # each follow-up is a whole prompt (a trace whose lengths include history)


@dataclass
class DatasetInfo:
    """What a report needs to say about the sample."""

    name: str
    description: str
    options: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # worth telling the user (a damaged dataset file)


NAMES = ("sharegpt", "random", "synthetic", "shared-prefix", "multi-turn", "jsonl", "azure", "burstgpt", "mooncake",
         "rate-profile")


def build(name: str, tokenizer, num_requests: int, seed: int = 0, **options) -> tuple[list[Request], DatasetInfo]:
    """Build `num_requests` requests of dataset `name`; options are the dataset's own flags."""
    from functools import partial

    from llmbench.datasets import (
        jsonl,
        multi_turn,
        random_lengths,
        rate_profile,
        shared_prefix,
        sharegpt_requests,
        synthetic,
        traces,
    )

    builders = {
        "sharegpt": sharegpt_requests.build,
        "random": random_lengths.build,
        "synthetic": synthetic.build,
        "shared-prefix": shared_prefix.build,
        "multi-turn": multi_turn.build,
        "jsonl": jsonl.build,
        "rate-profile": rate_profile.build,
        **{fmt: partial(traces.build, fmt) for fmt in traces.FORMATS},
    }
    if name not in builders:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}")
    return builders[name](tokenizer, num_requests, seed, **options)


__all__ = ["NAMES", "DatasetError", "DatasetInfo", "Request", "build"]
