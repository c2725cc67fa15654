"""Other tools' result files, read as llmbench results: `report`, `gate` and `plan --results` take them.

Each module knows one tool's files and turns them into `Imported` runs: a result dict with vLLM's
`--save-result` keys (the tool's own aggregates, so the figures agree with its summary) and, when the file has
them, per-request records. `as_results_folder` writes those into an llmbench results folder under a
temporary directory (removed when the process exits), so every reader of folders works on them unchanged, and
says in `metadata.json` where they came from and whether the records are per request or the figures aggregates
only.

    vLLM       `vllm bench serve --save-result [--save-detailed]` JSON
    guidellm   `guidellm benchmark` benchmarks.json
    AIPerf     profile_export.jsonl (per request) or profile_export_aiperf.json (aggregates)
    inference-perf  per_request_lifecycle_metrics.json, or its summary_*.json reports
    SGLang     `python -m sglang.bench_serving` JSONL (one run per line)
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.records import RecordWriter, RequestRecord


class ForeignFormatError(ValueError):
    """A file no reader recognises, or one whose contents do not hold what its format promises."""


@dataclass
class ImportedRun:
    result: dict
    records: list[RequestRecord] | None = None  # None: the file has aggregates only


@dataclass
class Imported:
    tool: str
    source: Path
    runs: list[ImportedRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read(path: Path | str) -> Imported:
    """The runs of one foreign file, or of the one foreign file a folder holds."""
    from llmbench.foreign import aiperf, guidellm, inference_perf, sglang, vllm

    path = Path(path)
    readers = (vllm, sglang, guidellm, aiperf, inference_perf)
    if path.is_dir():
        for reader in readers:
            found = reader.find(path)
            if found:
                return reader.read(found)
        raise ForeignFormatError(f"{path}: neither an llmbench results folder nor one holding a vLLM, SGLang, "
                                 "guidellm, AIPerf or inference-perf result file")
    for reader in readers:
        if reader.recognises(path):
            return reader.read(path)
    raise ForeignFormatError(f"{path}: not a result file of vLLM, SGLang, guidellm, AIPerf or inference-perf")


def as_results_folder(path: Path | str) -> Path:
    """`path` itself when it is an llmbench results folder; else the foreign file converted into one."""
    from llmbench import results

    path = Path(path)
    if path.is_dir() and results.result_files(path):
        return path
    imported = read(path)
    if not imported.runs:
        raise ForeignFormatError(f"{path}: a {imported.tool} file with no runs in it")
    scratch = tempfile.mkdtemp(prefix="llmbench-import-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    folder = Path(scratch) / (path.stem if path.is_file() else path.name)
    folder.mkdir()
    per_request = all(run.records is not None for run in imported.runs)
    kind = "per-request records" if per_request else "aggregates only (the file has no per-request data)"
    results.write_metadata(folder, {"imported_from": {"tool": imported.tool, "file": str(imported.source),
                                                      "records": kind, "notes": imported.notes},
                                    "target": {"base_url": f"{imported.tool} run ({imported.source.name})"}})
    seen: dict[str, int] = {}
    for run in imported.runs:
        label = run.result.get("label") or results.label_for(_rate(run.result), run.result.get("max_concurrency"))
        seen[label] = seen.get(label, 0) + 1
        label = label if seen[label] == 1 else f"{label}-run{seen[label]}"
        files = results.RunFiles(folder, label)
        body = {**run.result, "imported_from": imported.tool,
                "notes": [*run.result.get("notes", []), f"imported from {imported.tool} ({kind})"]}
        if run.records is not None:
            writer = RecordWriter(files.records)
            for record in run.records:
                writer.write(record)
            writer.close()
        results.write_result(files, body)
    return folder


def _rate(result: dict) -> float:
    rate = result.get("request_rate")
    try:
        return float(rate)
    except (TypeError, ValueError):
        return float("inf")


def load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ForeignFormatError(f"{path}: not readable JSON ({err})") from None


def record_from_timings(index: int, start: float, ttft: float | None, gaps: list[float], output_tokens: int | None,
                        prompt_len: int, error: str = "", scheduled: float | None = None) -> RequestRecord:
    """A record from what every tool keeps per request: start, TTFT, the gaps between chunks (seconds)."""
    record = RequestRecord(index, start if scheduled is None else scheduled, dispatched=start, start=start,
                           prompt_len=prompt_len, expected_prompt_len=prompt_len, output_tokens=output_tokens)
    if ttft is not None and ttft > 0 and not error:
        t = start + ttft
        record.chunk_times = [t]
        for gap in gaps:
            t += gap
            record.chunk_times.append(t)
        record.chunk_tokens = [None] * len(record.chunk_times)
        record.success = True
        record.end = t
    else:
        record.error = error or "failed (the tool recorded no first token)"
        record.end = start
    return record
