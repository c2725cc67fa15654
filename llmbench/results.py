"""Read a results folder back: per-rate results, per-request records as DataFrames, scraped series."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from llmbench.records import read_records, records_frame


def result_files(folder: Path | str) -> list[Path]:
    folder = Path(folder)
    files = [p for p in folder.glob("*.json") if p.name not in ("metadata.json", "plan.json")]
    return sorted(files, key=lambda p: (_rate_key(json.loads(p.read_text()).get("request_rate")), p.name))


def _rate_key(rate) -> float:
    try:
        return float(rate)
    except (TypeError, ValueError):
        return float("inf")


def load_results(folder: Path | str) -> list[dict]:
    """Every per-rate result dict of a results folder, by increasing rate."""
    return [json.loads(p.read_text()) for p in result_files(folder)]


def load_metadata(folder: Path | str) -> dict:
    path = Path(folder) / "metadata.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def load_records(folder: Path | str, label: str | None = None) -> pd.DataFrame:
    """Per-request records (one row each, latencies in seconds) of one label, or all with a `label` column."""
    folder = Path(folder)
    frames = []
    for result in load_results(folder):
        if label is not None and result["label"] != label:
            continue
        path = folder / result.get("records_file", f"{result['label']}.records.jsonl")
        if path.is_file():
            frame = records_frame(read_records(path))
            frame.insert(0, "label", result["label"])
            frame.insert(1, "request_rate", result["request_rate"])
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_server_metrics(folder: Path | str, label: str) -> pd.DataFrame:
    path = Path(folder) / f"{label}.server_metrics.jsonl"
    if not path.is_file():
        return pd.DataFrame()
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
