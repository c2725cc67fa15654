"""Locust transport capacity: the highest sustained rate with 1, 2 and 4 local workers against a zero-latency
server, beside the native client's figure (same criterion: P99 send lag under 5 ms, achieved rate within 2%).

    python benchmarks/locust_capacity.py [--rates 100,200,400,800] [--seconds 4]
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmbench.scripted_server import ScriptedProcess  # noqa: E402

LAG_LIMIT_MS = 5.0


def one(url: str, engine: str, workers: int, rate: float, seconds: float, out: Path) -> dict:
    args = [sys.executable, "-m", "llmbench.cli", "run", "--base-url", url, "--rate", str(rate),
            "--num-prompts", str(int(rate * seconds)), "--dataset", "random", "--random-input-len", "16",
            "--random-output-len", "4", "--out", str(out), "--no-progress", "--engine", engine,
            "--workers", str(workers)]
    subprocess.run(args, check=True, capture_output=True)
    return json.loads((out / f"rate-{rate:g}.json").read_text())


@click.command()
@click.option("--rates", default="100,200,400,800,1200", show_default=True)
@click.option("--seconds", default=4.0, show_default=True)
@click.option("--workers", "worker_counts", default="1,2,4", show_default=True)
def main(rates: str, seconds: float, worker_counts: str) -> None:
    with ScriptedProcess() as server:
        url = server.url
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; zero-latency server\n")
        print(f"{'transport':<18}{'rate':>7}{'achieved':>10}{'P99 lag ms':>12}{'failed':>8}  sustained")
        best: dict[str, float] = {}
        setups = [("native", 1)] + [("locust", int(w)) for w in worker_counts.split(",")]
        with tempfile.TemporaryDirectory() as tmp:
            for engine, workers in setups:
                name = "native (1 process)" if engine == "native" else f"locust x{workers}"
                for rate in (float(r) for r in rates.split(",")):
                    m = one(url, engine, workers, rate, seconds, Path(tmp) / f"{engine}-{workers}-{rate:g}")
                    ok = m["p99_send_lag_ms"] < LAG_LIMIT_MS and abs(m["achieved_rate"] - rate) / rate < 0.02 \
                        and m["failed"] == 0
                    print(f"{name:<18}{rate:>7g}{m['achieved_rate']:>10.1f}{m['p99_send_lag_ms']:>12.2f}"
                          f"{m['failed']:>8}  {'yes' if ok else 'no'}", flush=True)
                    if not ok:
                        break
                    best[name] = rate
        print()
        for name, rate in best.items():
            print(f"{name}: highest sustained rate {rate:g} req/s")


if __name__ == "__main__":
    main()
