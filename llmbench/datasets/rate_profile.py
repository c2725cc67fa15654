"""`rate-profile`: a CSV `time,qps` (seconds, requests per second, linear in between): arrivals drawn from a
Poisson process whose rate follows the profile, with random-dataset lengths. `plan --timeline` reads the
profile itself; `run` replays one draw of it at its own times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.random_lengths import uniform_lengths
from llmbench.datasets.text import random_text_of_length

STEP = 10.0  # seconds over which the profile's rate is taken as constant for a draw


def read_profile(path: str | Path, time_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The profile's times (s, divided by `time_scale`) and rates (req/s)."""
    path = Path(path or "")
    if not path.is_file():
        raise DatasetError(f"the rate-profile dataset needs --dataset-path FILE ({path}: no such file)")
    frame = pd.read_csv(path)
    if not {"time", "qps"} <= set(frame.columns):
        raise DatasetError(f"{path}: a rate profile needs the columns time,qps (seconds, requests per second)")
    t, qps = frame["time"].to_numpy(float) / time_scale, frame["qps"].to_numpy(float)
    if len(t) < 2 or np.any(np.diff(t) <= 0) or np.any(qps < 0):
        raise DatasetError(f"{path}: times must increase and rates be >= 0 (two rows at least)")
    return t, qps


def expected_counts(t: np.ndarray, qps: np.ndarray, step: float) -> np.ndarray:
    """Requests expected in each `step` from the profile's start (the rate at each step's middle)."""
    edges = np.arange(t[0], t[-1] + step / 2, step)
    mids = np.minimum(edges[:-1] + step / 2, t[-1]) if len(edges) > 1 else np.array([t[0]])
    return np.interp(mids, t, qps) * step


def build(tokenizer, num_requests: int, seed: int = 0, path: str | None = None, time_scale: float = 1.0,
          input_len: int = 256, output_len: int = 64) -> tuple[list[Request], DatasetInfo]:
    t, qps = read_profile(path, time_scale)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(expected_counts(t, qps, STEP))
    times = np.sort(np.concatenate([(i + rng.random(c)) * STEP for i, c in enumerate(counts)]))
    if num_requests:
        times = times[:num_requests]
    if not len(times):
        raise DatasetError(f"{path}: the profile's rates draw no request")
    inputs = uniform_lengths(rng, input_len, 0.0, len(times))
    outputs = uniform_lengths(rng, output_len, 0.0, len(times))
    requests = [Request(random_text_of_length(tokenizer, int(i), seed + k), int(i), int(o), timestamp=float(t))
                for k, (t, i, o) in enumerate(zip(times, inputs, outputs, strict=True))]
    info = DatasetInfo("rate-profile", f"rate profile {Path(path).name}: one Poisson draw, {len(requests)} requests, input "
                       f"{input_len}, output {output_len}, seed {seed}",
                       {"path": path, "time_scale": time_scale, "input_len": input_len, "output_len": output_len})
    return requests, info
