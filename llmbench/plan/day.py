"""A day of traffic for `plan --timeline`: arrivals per short step, from a trace's timestamps (the public trace
formats, or llmbench jsonl with timestamps) or a rate profile (CSV `time,qps`, seconds, linear in between).

Only timestamps and lengths are read (no prompt is synthesized), so a day at 50,000 requests a window loads in
seconds: counting arrivals per step is one histogram.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmbench.datasets import DatasetError

SOURCES = ("azure", "burstgpt", "mooncake", "jsonl", "rate-profile")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def parse_duration(text: str) -> float:
    """`5m`, `30s`, `1h`, `90` (seconds)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(s|m|h|)\s*", str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"bad duration {text!r}: use e.g. 30s, 5m, 1h")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass
class Day:
    """Offered load over time: `counts[i]` requests arrive in step i (`step_s` long, from `start_s`)."""

    counts: np.ndarray
    step_s: float
    source: str
    prompts: np.ndarray | None = None  # the trace's lengths, when it has them
    outputs: np.ndarray | None = None

    @property
    def rates(self) -> np.ndarray:
        return self.counts / self.step_s

    @property
    def hours(self) -> float:
        return len(self.counts) * self.step_s / 3600.0

    def windows(self, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Window starts (s) and mean offered rates (req/s) over windows of `window_s`."""
        per = max(int(round(window_s / self.step_s)), 1)
        n = math.ceil(len(self.counts) / per)
        padded = np.zeros(n * per)
        padded[: len(self.counts)] = self.counts
        sums = padded.reshape(n, per).sum(axis=1)
        lengths = np.full(n, per * self.step_s)
        lengths[-1] = (len(self.counts) - (n - 1) * per) * self.step_s
        return np.arange(n) * per * self.step_s, sums / lengths


def load(name: str, options: dict, window_s: float) -> Day:
    """The day of `--dataset NAME --dataset-path FILE`, in steps of a tenth of a window (at most a minute)."""
    if name not in SOURCES:
        raise DatasetError(f"--timeline needs a workload with time in it: --dataset {', '.join(SOURCES)} "
                           f"(got {name})")
    path = Path(options.get("path") or "")
    if not path.is_file():
        raise DatasetError(f"the {name} dataset needs --dataset-path FILE")
    step = min(window_s / 10, 60.0)
    scale = float(options.get("time_scale") or 1.0)
    if name == "rate-profile":
        return _profile(path, step, scale)
    if name == "jsonl":
        times, prompts, outputs = _jsonl(path)
    else:
        from llmbench.datasets import traces

        rows, _ = traces.read_rows(name, path, options.get("model_filter"))
        times, prompts, outputs = rows["t"].to_numpy(float), rows["input"].to_numpy(), rows["output"].to_numpy()
    start = float(options.get("trace_start") or 0.0)
    times = np.sort(times - times.min()) if len(times) else times
    keep = times >= start
    if options.get("trace_duration"):
        keep &= times < start + float(options["trace_duration"])
    times = (times[keep] - start) / scale
    if not len(times):
        raise DatasetError(f"{path}: no arrivals in the window asked")
    n = max(math.ceil((times.max() + 1e-9) / step), 1)
    counts = np.bincount(np.minimum((times / step).astype(int), n - 1), minlength=n).astype(float)
    return Day(counts, step, f"{name} {path.name}: {len(times):,} requests over {n * step / 3600:.2f} h",
               None if prompts is None else np.asarray(prompts)[keep].astype(int),
               None if outputs is None else np.asarray(outputs)[keep].astype(int))


def _profile(path: Path, step: float, scale: float) -> Day:
    from llmbench.datasets.rate_profile import expected_counts, read_profile

    t, qps = read_profile(path, scale)
    counts = expected_counts(t, qps, step)
    return Day(counts, step, f"rate profile {path.name}: {counts.sum():,.0f} requests expected over "
                             f"{len(counts) * step / 3600:.2f} h")


def _jsonl(path: Path) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    times, outputs = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            times.append(float(item["timestamp"]))
            outputs.append(int(item.get("output_len") or 0))
        except (ValueError, KeyError, TypeError):
            raise DatasetError(f"{path}: line {number} has no timestamp (seconds)") from None
    return np.array(times), None, np.array(outputs) if any(outputs) else None
