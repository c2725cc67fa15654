"""Client timing fidelity: |measured - truth| of TTFT, ITL and TPOT against the scripted server's own
record of when it wrote each chunk, at a few request rates.

    python benchmarks/client_timing.py [--rates 10,50,100] [--seconds 20] [--ttft-ms 40] [--itl-ms 8]

The target: P99 error under 1 ms at 50 req/s on an idle machine (tests/test_client_timing.py asserts
only bounds that hold on a slow, loaded machine).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import urllib.request
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmbench import arrivals  # noqa: E402
from llmbench.datasets import Request  # noqa: E402
from llmbench.runner import RunConfig, execute  # noqa: E402
from llmbench.scripted_server import ScriptedProcess  # noqa: E402

TOKENS = 12


def errors_ms(url: str, records: list, offset: int) -> dict[str, np.ndarray]:
    with urllib.request.urlopen(url + "/truth") as resp:
        truth = {item["prompt"]: item["chunk_offsets"] for item in json.load(resp)}
    out: dict[str, list[float]] = {"TTFT": [], "ITL": [], "TPOT": []}
    for r in records:
        chunks = truth[f"req-{offset + r.index}"]
        out["TTFT"].append(r.ttft - chunks[0])
        out["ITL"] += [a - b for a, b in zip(r.itl, np.diff(chunks), strict=True)]
        out["TPOT"].append((r.latency - r.ttft) / (TOKENS - 1) - (chunks[-1] - chunks[0]) / (TOKENS - 1))
    return {k: np.abs(v) * 1000 for k, v in out.items()}


@click.command()
@click.option("--rates", default="10,50,100", show_default=True)
@click.option("--seconds", default=20.0, show_default=True, help="Arrivals per rate.")
@click.option("--ttft-ms", default=40.0, show_default=True)
@click.option("--itl-ms", default=8.0, show_default=True)
def main(rates: str, seconds: float, ttft_ms: float, itl_ms: float) -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}; scripted server (TTFT {ttft_ms:g} ms, ITL {itl_ms:g} ms) in another process\n")
    print(f"{'rate':>6}  {'metric':<5}{'median ms':>11}{'P99 ms':>9}{'max ms':>9}")
    with ScriptedProcess("--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)) as server:
        offset = 0
        for rate in arrivals.parse_rates(rates):
            n = int(rate * seconds)
            reqs = [Request(f"req-{offset + i}", 1, TOKENS) for i in range(n)]
            cfg = RunConfig(base_url=server.url, model="scripted", rate=rate, scrape=False)
            result = execute(cfg, reqs, arrivals.schedule(n, rate, 1.0, seed=0), None)
            for name, err in errors_ms(server.url, result.records, offset).items():
                print(f"{rate:>6g}  {name:<5}{np.median(err):>11.3f}{np.percentile(err, 99):>9.3f}{err.max():>9.3f}")
            offset += n
    print("\ntarget: P99 < 1 ms at 50 req/s on an idle machine")


if __name__ == "__main__":
    main()
