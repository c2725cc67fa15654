"""Timing fidelity against a server with a scripted schedule: what the client measures is the truth."""

import json
import urllib.request

import numpy as np

from llmbench import arrivals
from llmbench.datasets import Request
from llmbench.runner import RunConfig, execute

TTFT_MS, ITL_MS, TOKENS = 40, 8, 12


def test_timing_within_1ms_at_50_rps(scripted, tmp_path):
    server = scripted("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    n, rate = 1000, 50.0
    requests = [Request(f"req-{i}", 1, TOKENS) for i in range(n)]
    cfg = RunConfig(base_url=server.url, model="scripted", rate=rate, progress=False, scrape=False)
    result = execute(cfg, requests, arrivals.schedule(n, rate, 1.0, seed=0), tmp_path / "run")
    m = result.metrics
    assert m["completed"] == n and m["failed"] == 0
    assert abs(m["achieved_rate"] - rate) / rate < 0.02
    with urllib.request.urlopen(server.url + "/truth") as resp:
        truth = {item["prompt"]: item["chunk_offsets"] for item in json.load(resp)}
    ttft_err, itl_err, tpot_err = [], [], []
    for r in result.records:
        offsets = truth[f"req-{r.index}"]
        assert len(offsets) == len(r.chunk_times) == TOKENS
        ttft_err.append(r.ttft - offsets[0])
        itl_err += [a - b for a, b in zip(r.itl, np.diff(offsets), strict=True)]
        true_tpot = (offsets[-1] - offsets[0]) / (TOKENS - 1)
        tpot_err.append((r.latency - r.ttft) / (TOKENS - 1) - true_tpot)
    for name, err in (("TTFT", ttft_err), ("ITL", itl_err), ("TPOT", tpot_err)):
        p99 = np.percentile(np.abs(err), 99) * 1000
        print(f"{name}: |measured - truth| median {np.median(np.abs(err)) * 1000:.3f} ms, P99 {p99:.3f} ms")
        assert p99 < 1.0, name
    assert abs(m["median_ttft_ms"] - TTFT_MS) < 3 and abs(m["median_itl_ms"] - ITL_MS) < 3
    lines = (tmp_path / "run.records.jsonl").read_text().splitlines()
    assert len(lines) == n
