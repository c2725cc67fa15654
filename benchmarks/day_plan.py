"""How long `plan --timeline` takes over a day of traffic: an Azure-format CSV with N requests a 5-minute window
(50,000 by default: 14.4 M rows) is written to a temporary file, then loaded and played by the autoscaler.

    python benchmarks/day_plan.py [--per-window 50000]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llmbench.plan import autoscale
from llmbench.plan.day import load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-window", type=int, default=50_000)
    args = parser.parse_args()
    n = args.per_window * 288
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 86400, n))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "day.csv"
        pd.DataFrame({"TIMESTAMP": pd.Timestamp("2024-05-10") + pd.to_timedelta(t, unit="s"),
                      "ContextTokens": rng.integers(10, 4000, n),
                      "GeneratedTokens": rng.integers(1, 800, n)}).to_csv(path, index=False)
        start = time.perf_counter()
        day = load("azure", {"path": str(path)}, 300)
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        autoscale.play(autoscale.Policy("autoscale"), day.rates, day.step_s, 40.0, 0.2, 1.0)
        played = time.perf_counter() - start
    print(f"{platform.processor() or platform.machine()}: {n:,} requests ({args.per_window:,} a window): "
          f"load {loaded:.1f} s, one policy {played * 1000:.0f} ms")


if __name__ == "__main__":
    main()
