"""Prompt lookup (n-gram) proposals: if the context's last n tokens occurred earlier, guess that what
followed them then follows now. No second model; drafts are deterministic (one-hot q)."""

from __future__ import annotations

import numpy as np


def propose_ngram(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The k tokens after the earliest earlier occurrence of the longest suffix n-gram, min_n <= n <= max_n
    (vLLM's rule); [] when none matches."""
    ctx = np.asarray(tokens, dtype=np.int64)
    total = len(ctx)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = ctx[total - n :]
        windows = np.lib.stride_tricks.sliding_window_view(ctx[: total - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if len(hits):
            start = int(hits[0]) + n
            return ctx[start : start + k].tolist()
    return []
