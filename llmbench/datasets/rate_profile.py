"""`rate-profile`: a CSV `time,qps` (seconds, requests per second, linear in between): arrivals drawn from a
Poisson process whose rate follows the profile, with random-dataset lengths. `plan --timeline` reads the
profile itself; `run` replays one draw of it at its own times."""

from __future__ import annotations

import numpy as np

from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.random_lengths import uniform_lengths
from llmbench.datasets.text import random_text_of_length


def build(tokenizer, num_requests: int, seed: int = 0, path: str | None = None, time_scale: float = 1.0,
          input_len: int = 256, output_len: int = 64) -> tuple[list[Request], DatasetInfo]:
    from llmbench.plan.day import load

    day = load("rate-profile", {"path": path, "time_scale": time_scale}, 10.0)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(day.counts)
    times = np.sort(np.concatenate([(i + rng.random(c)) * day.step_s for i, c in enumerate(counts)]))
    if num_requests:
        times = times[:num_requests]
    if not len(times):
        raise DatasetError(f"{path}: the profile's rates draw no request")
    inputs = uniform_lengths(rng, input_len, 0.0, len(times))
    outputs = uniform_lengths(rng, output_len, 0.0, len(times))
    requests = [Request(random_text_of_length(tokenizer, int(i), seed + k), int(i), int(o), timestamp=float(t))
                for k, (t, i, o) in enumerate(zip(times, inputs, outputs, strict=True))]
    info = DatasetInfo("rate-profile", f"{day.source}; one Poisson draw: {len(requests)} requests, input "
                       f"{input_len}, output {output_len}, seed {seed}",
                       {"path": path, "time_scale": time_scale, "input_len": input_len, "output_len": output_len})
    return requests, info
