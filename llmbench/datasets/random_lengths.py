"""`random`: vLLM's uniform lengths around a mean, prompts of consecutive token ids (no dataset read)."""

from __future__ import annotations

import math

import numpy as np

from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.text import random_text_of_length


def uniform_lengths(rng: np.random.Generator, mean: int, ratio: float, n: int) -> np.ndarray:
    """vLLM: integers uniform in [floor(L(1-r)), ceil(L(1+r))]; r = 0 gives exactly L."""
    if not 0 <= ratio < 1:
        raise DatasetError(f"--random-range-ratio must be in [0, 1), got {ratio}")
    low, high = max(math.floor(mean * (1 - ratio)), 1), max(math.ceil(mean * (1 + ratio)), 1)
    return rng.integers(low, high + 1, size=n)


def build(tokenizer, num_requests: int, seed: int = 0, input_len: int = 1024, output_len: int = 128,
          range_ratio: float = 0.0) -> tuple[list[Request], DatasetInfo]:
    rng = np.random.default_rng(seed)
    inputs = uniform_lengths(rng, input_len, range_ratio, num_requests)
    outputs = uniform_lengths(rng, output_len, range_ratio, num_requests)
    offsets = rng.integers(0, 2**31, size=num_requests)
    requests = [Request(random_text_of_length(tokenizer, int(i), int(o)), int(i), int(out))
                for i, out, o in zip(inputs, outputs, offsets, strict=True)]
    info = DatasetInfo("random", f"random (vLLM semantics): input {input_len}, output {output_len}, "
                       f"range ratio {range_ratio}, random token ids, seed {seed}",
                       {"input_len": input_len, "output_len": output_len, "range_ratio": range_ratio})
    return requests, info
