"""AIPerf `aiperf profile` artifacts: profile_export.jsonl (one request a line: start, TTFT, inter-chunk
latencies) and profile_export_aiperf.json (aggregates). AIPerf's `inter_token_latency` is vLLM's TPOT and its
`inter_chunk_latency` vLLM's ITL."""

from __future__ import annotations

import json
from pathlib import Path

from llmbench.foreign import Imported, ImportedRun, load_json, record_from_timings
from llmbench.foreign.common import copy_stats, first_json_line, peek_json

AGGREGATES, REQUESTS = "profile_export_aiperf.json", "profile_export.jsonl"
NAMES = {"mean": "avg", "median": "p50", "std": "std", "p90": "p90", "p95": "p95", "p99": "p99"}
LATENCIES = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "itl": "inter_chunk_latency",
             "e2el": "request_latency", "ttfo": "time_to_first_output_token"}


def recognises(path: Path) -> bool:
    data = peek_json(path)
    if isinstance(data, dict) and "aiperf_version" in data:
        return True
    line = first_json_line(path)
    return bool(line) and isinstance(line.get("metadata"), dict) and "request_start_ns" in line["metadata"]


def find(folder: Path) -> Path | None:
    for name in (AGGREGATES, REQUESTS):
        if (folder / name).is_file() and recognises(folder / name):
            return folder / name
    return None


def read(path: Path) -> Imported:
    aggregates = path if path.name.endswith(".json") else path.with_name(AGGREGATES)
    requests = path if path.suffix == ".jsonl" else path.with_name(REQUESTS)
    records = _records(requests) if requests.is_file() else None
    result = _result(load_json(aggregates)) if aggregates.is_file() else _from_records(records)
    return Imported("AIPerf", path, [ImportedRun(result, records)])


def _avg(data: dict, name: str):
    return (data.get(name) or {}).get("avg")


def _result(data: dict) -> dict:
    config = data.get("input_config") or {}
    phase = next((p for p in config.get("phases", []) if p.get("kind") == "profiling"), {})
    models = (config.get("models") or {}).get("items") or [{}]
    completed = int(_avg(data, "request_count") or 0)
    failed = sum(int(e.get("count", 0)) for e in data.get("error_summary") or [] if isinstance(e, dict))
    duration = _avg(data, "benchmark_duration")
    result = {"label": None, "backend": "aiperf", "model_id": models[0].get("name"),
              "endpoint_type": (config.get("endpoint") or {}).get("type"),
              "request_rate": phase.get("rate") or "inf", "max_concurrency": phase.get("concurrency"),
              "duration": duration, "completed": completed, "failed": failed, "num_prompts": completed + failed,
              "request_throughput": _avg(data, "request_throughput"),
              "output_throughput": _avg(data, "output_token_throughput"),
              "total_input_tokens": _avg(data, "total_isl"), "total_output_tokens": _avg(data, "total_osl")}
    if duration and result["total_input_tokens"] is not None and result["total_output_tokens"] is not None:
        result["total_token_throughput"] = (result["total_input_tokens"] + result["total_output_tokens"]) / duration
    for metric, name in LATENCIES.items():
        copy_stats(result, metric, data.get(name), NAMES)
    if result.get("p99_ttfo_ms") == result.get("p99_ttft_ms"):  # no reasoning: TTFO is TTFT
        for key in [k for k in result if k.endswith("_ttfo_ms")]:
            del result[key]
    return result


def _records(path: Path) -> list:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [x for x in lines if (x.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]
    origin = min((x["metadata"]["request_start_ns"] for x in lines), default=0)
    out = []
    for i, line in enumerate(lines):
        meta, metrics = line["metadata"], line.get("metrics") or {}

        def value(name: str, default=None, m=metrics):
            return (m.get(name) or {}).get("value", default)

        start = (meta["request_start_ns"] - origin) / 1e9
        issued = meta.get("credit_issued_ns")
        gaps = [g / 1000 for g in value("inter_chunk_latency", []) or []]
        ttft = value("time_to_first_token")
        error = line.get("error")
        out.append(record_from_timings(i, start, ttft / 1000 if ttft else None, gaps,
                                       value("output_sequence_length"), value("input_sequence_length", 0),
                                       str(error.get("message", error)) if isinstance(error, dict) else
                                       (str(error) if error else ""),
                                       scheduled=(issued - origin) / 1e9 if issued else None))
    return out


def _from_records(records: list | None) -> dict:
    from llmbench.metrics import compute

    return {"label": None, "backend": "aiperf", "request_rate": "inf", **compute(records or [])}
