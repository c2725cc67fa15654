"""SGLang `python -m sglang.bench_serving --output-file F.jsonl`: one run per line; with `--output-details`,
per-request TTFTs and ITLs (no start times: records start together, so timelines are not meaningful)."""

from __future__ import annotations

import json
from pathlib import Path

from llmbench.foreign import ForeignFormatError, Imported, ImportedRun
from llmbench.foreign.common import first_json_line
from llmbench.foreign.vllm import DETAILED, detailed_records

RENAMED = {f"{stat}_e2e_latency_ms": f"{stat}_e2el_ms" for stat in ("mean", "median", "std", "p90", "p95", "p99")}


def recognises(path: Path) -> bool:
    line = first_json_line(path)
    return bool(line) and "completed" in line and "median_e2e_latency_ms" in line


def find(folder: Path) -> Path | None:
    return next((p for p in sorted(folder.glob("*.jsonl")) if recognises(p)), None)


def read(path: Path) -> Imported:
    runs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise ForeignFormatError(f"{path}:{number}: not a JSON line") from None
        result = {RENAMED.get(k, k): v for k, v in data.items() if k not in DETAILED}
        result |= {"label": None, "model_id": data.get("model_id") or data.get("backend"),
                   "failed": data.get("failed", 0), "dataset": data.get("dataset_name"),
                   "total_token_throughput": data.get("total_throughput")}
        runs.append(ImportedRun(result, detailed_records(data) if data.get("ttfts") else None))
    return Imported("SGLang", path, runs, ["bench_serving keeps no start times: the records' timelines are not drawn"])
