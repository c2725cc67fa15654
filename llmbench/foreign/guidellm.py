"""guidellm `guidellm run --output kind=json` (benchmarks.json): one benchmark per strategy, its metrics as
distributions (mean, median, percentiles), and each request's timings (first and last token iteration, the
number of token iterations: chunk times between them are spread evenly, so ITL percentiles are approximate)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from llmbench.foreign import Imported, ImportedRun, load_json
from llmbench.foreign.common import copy_stats, peek_json
from llmbench.records import RequestRecord

NAMES = {"mean": "mean", "median": "median", "std": "std_dev"}
PERCENTILES = {"p90": "p90", "p95": "p95", "p99": "p99"}
LATENCIES = {"ttft": ("time_to_first_token_ms", 1.0), "tpot": ("time_per_output_token_ms", 1.0),
             "itl": ("inter_token_latency_ms", 1.0), "e2el": ("request_latency", 1000.0),
             "ttfo": ("time_to_first_output_token_ms", 1.0)}


def recognises(path: Path) -> bool:
    data = peek_json(path)
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and \
        any(isinstance(b, dict) and b.get("type_") == "generative_benchmark" for b in data["benchmarks"])


def find(folder: Path) -> Path | None:
    return next((p for p in sorted(folder.glob("*.json")) if recognises(p)), None)


def read(path: Path) -> Imported:
    data = load_json(path)
    backend = (data.get("config", {}).get("spec", {}) or {}).get("backend", {}) or {}
    runs = [_run(b, backend) for b in data["benchmarks"] if b.get("type_") == "generative_benchmark"]
    return Imported("guidellm", path, runs, [
        "chunk times spread evenly between each request's first and last token (guidellm keeps no per-chunk "
        "times): ITL percentiles from the records are approximate",
        "guidellm's TPOT is latency / output tokens (the first token included); the table shows guidellm's, the "
        "records vLLM's (E2E - TTFT) / (tokens - 1)"])


def _successful(metrics: dict, name: str) -> dict:
    return (metrics.get(name) or {}).get("successful") or {}


def _run(bench: dict, backend: dict) -> ImportedRun:
    strategy = bench.get("config", {}).get("strategy", {}) or {}
    metrics = bench.get("metrics", {})
    totals = metrics.get("request_totals", {})
    rate = strategy.get("rate")
    streams = strategy.get("streams")
    result = {"label": None, "backend": "guidellm", "model_id": backend.get("model"),
              "endpoint_type": backend.get("request_format"),
              "request_rate": rate if isinstance(rate, int | float) and math.isfinite(rate) else "inf",
              "max_concurrency": streams if strategy.get("type_") == "concurrent" else None,
              "strategy": strategy.get("type_"), "duration": bench.get("duration"),
              "completed": totals.get("successful", 0), "failed": totals.get("errored", 0),
              "num_prompts": totals.get("total", 0),
              "request_throughput": _successful(metrics, "requests_per_second").get("mean"),
              "output_throughput": _successful(metrics, "output_tokens_per_second").get("mean"),
              "total_token_throughput": _successful(metrics, "tokens_per_second").get("mean"),
              "total_input_tokens": _successful(metrics, "prompt_token_count").get("total_sum"),
              "total_output_tokens": _successful(metrics, "output_token_count").get("total_sum")}
    for metric, (name, scale) in LATENCIES.items():
        stats = _successful(metrics, name)
        copy_stats(result, metric, stats, NAMES, scale)
        copy_stats(result, metric, stats.get("percentiles"), PERCENTILES, scale)
    if result.get("p99_ttfo_ms") == result.get("p99_ttft_ms"):  # no reasoning: TTFO is TTFT, not shown apart
        for key in [k for k in result if k.endswith("_ttfo_ms")]:
            del result[key]
    requests = bench.get("requests", {})
    listed = [*(requests.get("successful") or []), *(requests.get("errored") or [])]
    origin = bench.get("start_time") or min((r.get("request_start_time") or 0 for r in listed), default=0)
    records = [_record(i, r, origin) for i, r in enumerate(listed)] if listed else None
    return ImportedRun(result, records)


def _record(index: int, request: dict, origin: float) -> RequestRecord:
    info = request.get("info", {})
    timings = info.get("timings", {})
    start = (timings.get("request_start") or request.get("request_start_time") or origin) - origin
    targeted = timings.get("targeted_start")
    out = request.get("output_metrics") or {}
    prompt = (request.get("input_metrics") or {}).get("total_tokens") or 0
    record = RequestRecord(index, (targeted - origin) if targeted else start, dispatched=start, start=start,
                           prompt_len=prompt, expected_prompt_len=prompt,
                           output_tokens=out.get("total_tokens") or out.get("text_tokens"))
    first, last = timings.get("first_token_iteration"), timings.get("last_token_iteration")
    if info.get("status") == "completed" and first and last:
        n = max(int(timings.get("token_iterations") or 1), 1)
        record.chunk_times = list(np.linspace(first - origin, last - origin, n)) if n > 1 else [first - origin]
        record.chunk_tokens = [None] * n
        answer = timings.get("first_output_token_iteration")
        record.first_output = (answer - origin) if answer else None
        record.success = True
        record.end = (timings.get("request_end") or last) - origin
    else:
        record.error = str(info.get("error") or f"guidellm status {info.get('status')}")
        record.end = start
    return record
