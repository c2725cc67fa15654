"""What the readers share: stats copied under vLLM's key names, and a quick look into a JSON file."""

from __future__ import annotations

import json
from pathlib import Path

STATS = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99"}


def copy_stats(out: dict, metric: str, source: dict | None, names: dict[str, str], scale: float = 1.0) -> None:
    """`out[f"{stat}_{metric}_ms"] = source[names[stat]] * scale` for each stat the source has."""
    for stat, name in names.items():
        value = (source or {}).get(name)
        if isinstance(value, int | float):
            out[f"{stat}_{metric}_ms"] = float(value) * scale


def peek_json(path: Path) -> object | None:
    """The parsed file if it is JSON (None otherwise): readers recognise their format by its keys."""
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def first_json_line(path: Path) -> dict | None:
    if path.suffix != ".jsonl" or not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8") as f:
            line = f.readline()
        data = json.loads(line)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
