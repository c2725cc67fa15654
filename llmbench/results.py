"""The results folder: the only place its file names and labels are spelled; writes it and reads it back.

    metadata.json                 target, dataset, tokenizer, machine, the run's options
    <label>.json                  one load level: vLLM `--save-result` keys plus llmbench's extras
    <label>.records.jsonl         per request, appended as each finishes (nothing measured is lost)
    <label>.server_metrics.jsonl  the target's /metrics, scraped once a second
    <label>.engine_steps.jsonl    the bundled engine's per-step statistics (for `llmbench plan`)
    <label>.locust/               Locust transport: one records file and one meta file per worker
    summary.csv                   one row per load level; plan.json, report.html after plan/sweep
    engine.log                    the bundled engine's output, when llmbench started it

A label names a load level: `rate-10`, `rate-inf`, `rate-10-c64` (with a concurrency cap), `users-8`; a run
with `--append` into a folder that has them writes `rate-10-run2` (then `-run3`, ...) beside them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from llmbench import machine
from llmbench.records import read_records, records_frame

METADATA, SUMMARY, PLAN, REPORT = "metadata.json", "summary.csv", "plan.json", "report.html"
ENGINE_LOG = "engine.log"  # the bundled engine's output, when llmbench started it
NOT_RESULTS = (METADATA, PLAN)
SUMMARY_KEYS = ["label", "request_rate", "achieved_rate", "completed", "failed", "request_throughput",
                "request_goodput", "slo_attainment", "kept_up", "output_throughput", "total_token_throughput", "mean_ttft_ms",
                "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms",
                "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms", "p99_send_lag_ms",
                "max_client_stall_ms", "client_overloaded", "saturated", "interrupted"]
SPEC_KEYS = ["spec_draft_tokens", "spec_accepted_tokens", "spec_acceptance_rate"]


def label_for(rate: float, max_concurrency: int | None = None, users: int | None = None) -> str:
    if users:
        return f"users-{users}"
    base = "rate-inf" if math.isinf(rate) else f"rate-{rate:g}"
    return base + (f"-c{max_concurrency}" if max_concurrency else "")


@dataclass(frozen=True)
class RunFiles:
    """Where one load level's files go."""

    folder: Path
    label: str

    @property
    def result(self) -> Path:
        return self.folder / f"{self.label}.json"

    @property
    def records(self) -> Path:
        return self.folder / f"{self.label}.records.jsonl"

    @property
    def server_metrics(self) -> Path:
        return self.folder / f"{self.label}.server_metrics.jsonl"

    @property
    def engine_steps(self) -> Path:
        return self.folder / f"{self.label}.engine_steps.jsonl"

    @property
    def locust_dir(self) -> Path:
        return self.folder / f"{self.label}.locust"

    @property
    def locust_csv_prefix(self) -> Path:
        return self.folder / f"{self.label}.locust"

    @property
    def locust_log(self) -> Path:
        return self.folder / f"{self.label}.locust-master.log"

    @property
    def plain_files(self) -> tuple[Path, ...]:
        """Every file of this label apart from the Locust folder."""
        return self.result, self.records, self.server_metrics, self.engine_steps, self.locust_log


def worker_records(folder: Path, worker: str) -> Path:
    return Path(folder) / f"{worker}.records.jsonl"


def worker_stalls(folder: Path, worker: str) -> Path:
    """The worker's own client stalls, one [start, end] a line, seconds from its t0."""
    return Path(folder) / f"{worker}.stalls.jsonl"


def worker_meta(folder: Path, worker: str) -> Path:
    return Path(folder) / f"{worker}.meta.json"


def worker_metas(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.meta.json"))]


# -- claiming a folder ----------------------------------------------------------------------------------------
LOCK = ".llmbench.lock"


class FolderBusy(ValueError):
    """Another run holds the folder, or it already has results for a label this run would write."""


def existing_labels(folder: Path | str, labels: list[str]) -> list[str]:
    """The labels among `labels` that already have a result or records in `folder`."""
    folder = Path(folder)
    return [label for label in labels if RunFiles(folder, label).result.exists()
            or RunFiles(folder, label).records.exists()]


def append_suffix(folder: Path | str, labels: list[str]) -> str:
    """--append: the first `-runN` (N >= 2) under which none of `labels` has files yet."""
    n = 2
    while existing_labels(folder, [f"{label}-run{n}" for label in labels]):
        n += 1
    return f"-run{n}"


def run_order(label: str) -> tuple[int, str]:
    """Sort key for the runs of one rate in the order `--append` wrote them: rate-2, rate-2-run2, ..., -run10."""
    return len(label), label


def runs_by_rate(results: Iterable[dict]) -> dict[float, list[dict]]:
    """Results grouped by their request rate (`inf` for a closed loop), lowest first, each rate's runs in the
    order `--append` wrote them: the runs of one rate are one measurement of it."""
    by_rate: dict[float, list[dict]] = {}
    for r in results:
        if r.get("request_rate") is not None:
            by_rate.setdefault(float(r["request_rate"]), []).append(r)
    return {rate: sorted(runs, key=lambda r: run_order(r["label"])) for rate, runs in sorted(by_rate.items())}


def clear_labels(folder: Path | str, labels: list[str]) -> None:
    """--overwrite: every file of those labels goes, so no old record is counted with the new ones."""
    for label in labels:
        files = RunFiles(Path(folder), label)
        for path in files.plain_files:
            path.unlink(missing_ok=True)
        shutil.rmtree(files.locust_dir, ignore_errors=True)


@contextlib.contextmanager
def claimed(folder: Path | str) -> Iterator[None]:
    """Hold the folder for one run: a second `llmbench run` into it while this one writes is refused (a
    lock left by a run that died is taken over)."""
    folder = Path(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        holder = lock.read_text().strip() or "?"
        if holder.isdigit() and _alive(int(holder)):
            raise FolderBusy(f"{folder} is being written by another llmbench run (pid {holder}); "
                             "choose another --out") from None
        lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        if created and not any(folder.iterdir()):  # nothing was measured: no empty folder left behind
            folder.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- writing -----------------------------------------------------------------------------------------------
def write_metadata(folder: Path, meta: dict) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    body = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **meta, "machine": machine.machine()}
    (Path(folder) / METADATA).write_text(json.dumps(body, indent=2, default=str))


def write_result(files: RunFiles, body: dict) -> dict:
    body = {**body, "label": files.label, "records_file": files.records.name}
    files.result.write_text(json.dumps(body, indent=2, default=str))
    return body


def write_summary(folder: Path, rows: list[dict]) -> Path:
    """One row per load level the folder holds: this run's `rows`, and those of earlier runs kept beside them."""
    mine = {row.get("label") for row in rows}
    kept = [data for data in map(_read_json, result_files(folder)) if data and data.get("label") not in mine]
    rows = sorted([*kept, *rows], key=lambda row: (_rate_key(row.get("request_rate")), str(row.get("label"))))
    keys = SUMMARY_KEYS + [k for k in SPEC_KEYS if any(k in row for row in rows)]
    path = Path(folder) / SUMMARY
    pd.DataFrame([{k: row.get(k) for k in keys} for row in rows]).to_csv(path, index=False)
    return path


# -- reading -----------------------------------------------------------------------------------------------
def result_files(folder: Path | str) -> list[Path]:
    """The folder's per-rate results: JSON files that are one (a gate baseline or any other JSON kept beside
    them is not)."""
    found = []
    for path in Path(folder).glob("*.json"):
        if path.name in NOT_RESULTS:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "label" in data and "completed" in data:
            found.append((_rate_key(data.get("request_rate")), path.name, path))
    return [path for *_, path in sorted(found)]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _rate_key(rate) -> float:
    try:
        return float(rate)
    except (TypeError, ValueError):
        return float("inf")


def load_results(folder: Path | str) -> list[dict]:
    """Every per-rate result dict of a results folder, by increasing rate."""
    return [json.loads(p.read_text()) for p in result_files(folder)]


def load_metadata(folder: Path | str) -> dict:
    path = Path(folder) / METADATA
    return json.loads(path.read_text()) if path.is_file() else {}


def records_path(folder: Path | str, result: dict) -> Path:
    """A result's records file (named in the result; older results only by their label)."""
    return Path(folder) / result.get("records_file", RunFiles(Path(folder), result["label"]).records.name)


def load_records(folder: Path | str, label: str | None = None) -> pd.DataFrame:
    """Per-request records (one row each, latencies in seconds) of one label, or all with a `label` column."""
    folder = Path(folder)
    frames = []
    for result in load_results(folder):
        if label is not None and result["label"] != label:
            continue
        path = records_path(folder, result)
        if path.is_file():
            frame = records_frame(read_records(path))
            frame.insert(0, "label", result["label"])
            frame.insert(1, "request_rate", result["request_rate"])
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def load_server_metrics(folder: Path | str, label: str) -> pd.DataFrame:
    return pd.DataFrame(_jsonl(RunFiles(Path(folder), label).server_metrics))


def load_engine_steps(folder: Path | str, label: str | None = None) -> list[dict]:
    """The bundled engine's per-step statistics of one label, or of every label in the folder."""
    folder = Path(folder)
    if label is not None:
        return _jsonl(RunFiles(folder, label).engine_steps)
    return [step for path in sorted(folder.glob("*.engine_steps.jsonl")) for step in _jsonl(path)]
