"""vLLM `vllm bench serve --save-result` JSON; with `--save-detailed`, per-request TTFTs, ITLs and start times."""

from __future__ import annotations

from pathlib import Path

from llmbench.foreign import Imported, ImportedRun, load_json, record_from_timings
from llmbench.foreign.common import peek_json

DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times",
            "latencies", "queue_times")


def recognises(path: Path) -> bool:
    data = peek_json(path)
    return isinstance(data, dict) and "completed" in data and "request_throughput" in data and \
        "llmbench_version" not in data and "tag" not in data


def find(folder: Path) -> Path | None:
    return next((p for p in sorted(folder.glob("*.json")) if recognises(p)), None)


def read(path: Path) -> Imported:
    data = load_json(path)
    result = {k: v for k, v in data.items() if k not in DETAILED}
    result["label"] = None
    result.setdefault("failed", 0)
    records = detailed_records(data) if data.get("ttfts") else None
    return Imported("vLLM", path, [ImportedRun(result, records)])


def detailed_records(data: dict) -> list:
    n = len(data["ttfts"])
    starts = data.get("start_times") or [0.0] * n
    origin = min(starts) if starts else 0.0
    errors = data.get("errors") or [""] * n
    queue = data.get("queue_times") or [0.0] * n
    out = []
    for i in range(n):
        start = starts[i] - origin
        out.append(record_from_timings(i, start, data["ttfts"][i], (data.get("itls") or [[]] * n)[i],
                                       (data.get("output_lens") or [None] * n)[i], (data.get("input_lens") or
                                                                                  [0] * n)[i],
                                       errors[i] or "", scheduled=start - (queue[i] or 0.0)))
    return out
