"""inference-perf's report folder: stage_<N>_lifecycle_metrics.json (one load stage each: its requested rate,
latency distributions in seconds, throughputs), summary_lifecycle_metrics.json, and, with `per_request: true`,
per_request_lifecycle_metrics.json (start, end and every chunk's time), assigned to stages in order."""

from __future__ import annotations

import re
from pathlib import Path

from llmbench.foreign import Imported, ImportedRun, load_json
from llmbench.foreign.common import copy_stats, peek_json
from llmbench.records import RequestRecord

PER_REQUEST, SUMMARY = "per_request_lifecycle_metrics.json", "summary_lifecycle_metrics.json"
STAGE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")
NAMES = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
LATENCIES = {"ttft": "time_to_first_token", "tpot": "time_per_output_token", "itl": "inter_token_latency",
             "e2el": "request_latency"}


def _is_stage(data) -> bool:
    return isinstance(data, dict) and "load_summary" in data and "successes" in data


def recognises(path: Path) -> bool:
    data = peek_json(path)
    if path.name == PER_REQUEST:
        return isinstance(data, list)
    return _is_stage(data)


def find(folder: Path) -> Path | None:
    stages = sorted(folder.glob("stage_*_lifecycle_metrics.json"))
    for path in (*stages, folder / SUMMARY, folder / PER_REQUEST):
        if path.is_file() and recognises(path):
            return path
    return None


def read(path: Path) -> Imported:
    folder = path.parent
    stages = sorted((p for p in folder.glob("stage_*_lifecycle_metrics.json") if STAGE.search(p.name)),
                    key=lambda p: int(STAGE.search(p.name).group(1)))
    if path.name == SUMMARY or (not STAGE.search(path.name) and path.name != PER_REQUEST) or not stages:
        stages = [path if path.name != PER_REQUEST else folder / SUMMARY]
    bodies = [load_json(p) for p in stages]
    requests = load_json(folder / PER_REQUEST) if (folder / PER_REQUEST).is_file() else None
    runs, taken = [], 0
    ordered = sorted(requests or [], key=lambda r: r.get("start_time") or 0)
    for body in bodies:
        count = int(body["successes"].get("count", 0)) + int((body.get("failures") or {}).get("count", 0))
        mine = ordered[taken:taken + count] if requests is not None else None
        taken += count
        runs.append(ImportedRun(_result(body), _records(mine) if mine else None))
    return Imported("inference-perf", path, runs)


def _result(body: dict) -> dict:
    load, ok, failed = body.get("load_summary") or {}, body["successes"], body.get("failures") or {}
    throughput = ok.get("throughput") or {}
    result = {"label": None, "backend": "inference-perf", "request_rate": load.get("requested_rate") or "inf",
              "achieved_rate": load.get("achieved_rate"), "duration": body.get("benchmark_time_seconds"),
              "completed": int(ok.get("count", 0)), "failed": int(failed.get("count", 0)),
              "request_throughput": throughput.get("requests_per_sec"),
              "output_throughput": throughput.get("output_tokens_per_sec"),
              "total_token_throughput": throughput.get("total_tokens_per_sec"),
              "total_input_tokens": (ok.get("prompt_tokens") or {}).get("total"),
              "total_output_tokens": (ok.get("output_tokens") or {}).get("total")}
    result["num_prompts"] = result["completed"] + result["failed"]
    for metric, name in LATENCIES.items():
        copy_stats(result, metric, (ok.get("latency") or {}).get(name), NAMES, 1000.0)
    return result


def _records(requests: list[dict]) -> list[RequestRecord]:
    origin = min(r["start_time"] for r in requests)
    out = []
    for i, r in enumerate(requests):
        info = r.get("info") or {}
        metrics = info.get("response_metrics") or {}
        start = r["start_time"] - origin
        prompt = info.get("input_tokens") or ((info.get("request_metrics") or {}).get("text") or {}).get("input_tokens") or 0
        record = RequestRecord(i, start, dispatched=start, start=start, end=(r.get("end_time") or r["start_time"]) - origin,
                               prompt_len=prompt, expected_prompt_len=prompt, output_tokens=metrics.get("output_tokens"))
        times = metrics.get("chunk_times") or []
        if r.get("error") or not times:
            record.error = str(r.get("error") or "no chunk received")
        else:
            record.chunk_times = [t - origin for t in times]
            record.chunk_tokens = [None] * len(times)
            record.success = True
        out.append(record)
    return out
