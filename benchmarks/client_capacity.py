"""Client capacity: the highest request rate one llmbench process sustains against a zero-latency server.

    python benchmarks/client_capacity.py [--rates 250,500,1000,1500,2000] [--seconds 4]

A rate is sustained when the P99 send lag (actual - scheduled send) stays under 5 ms and the achieved
rate is within 2% of the requested one. The scripted server runs in its own process on the same machine.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmbench import arrivals  # noqa: E402
from llmbench.datasets import Request  # noqa: E402
from llmbench.runner import RunConfig, execute  # noqa: E402
from llmbench.scripted_server import ScriptedProcess  # noqa: E402

LAG_LIMIT_MS = 5.0


@click.command()
@click.option("--rates", default="500,1000,2000,3000,4000,5000", show_default=True)
@click.option("--seconds", default=4.0, show_default=True, help="Arrivals per rate.")
@click.option("--output-tokens", default=4, show_default=True)
def main(rates: str, seconds: float, output_tokens: int) -> None:
    with ScriptedProcess() as server:
        url = server.url
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"python {platform.python_version()}; zero-latency scripted server in another process\n")
        print(f"{'rate':>8}{'achieved':>10}{'P50 lag ms':>12}{'P99 lag ms':>12}{'failed':>8}  sustained")
        best = 0.0
        for rate in arrivals.parse_rates(rates):
            n = int(rate * seconds)
            reqs = [Request(f"p{i}", 1, output_tokens) for i in range(n)]
            cfg = RunConfig(base_url=url, model="scripted", rate=rate, scrape=False)
            m = execute(cfg, reqs, arrivals.schedule(n, rate, 1.0, seed=0), None).metrics
            ok = m["p99_send_lag_ms"] < LAG_LIMIT_MS and abs(m["achieved_rate"] - rate) / rate < 0.02 \
                and m["failed"] == 0
            best = rate if ok else best
            print(f"{rate:>8g}{m['achieved_rate']:>10.1f}{m['median_send_lag_ms']:>12.2f}"
                  f"{m['p99_send_lag_ms']:>12.2f}{m['failed']:>8}  {'yes' if ok else 'no'}")
        print(f"\nhighest sustained rate from one process: {best:g} req/s (target >= 1000)")


if __name__ == "__main__":
    main()
