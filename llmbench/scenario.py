"""Scenario files: dataset + arrivals + SLOs + engine flags in one YAML, overridable from the CLI."""

from __future__ import annotations

from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
KEYS = {"name", "description", "dataset", "backend", "arrivals", "run", "slo", "engine"}


class ScenarioError(ValueError):
    pass


def find(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (SCENARIO_DIR / name_or_path, SCENARIO_DIR / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    known = ", ".join(sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml")))
    raise ScenarioError(f"no scenario {name_or_path!r} (bundled: {known})")


def load(name_or_path: str) -> dict:
    import yaml

    path = find(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: invalid YAML ({err})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping")
    unknown = set(data) - KEYS
    if unknown:
        raise ScenarioError(f"{path}: unknown keys {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(KEYS))})")
    return data


def to_options(data: dict) -> dict:
    """Flatten a scenario into CLI option names (the CLI's own flags win over these)."""
    dataset = data.get("dataset") or {}
    arrivals = data.get("arrivals") or {}
    run = data.get("run") or {}
    opts: dict = {}
    if "name" in dataset:
        opts["dataset"] = dataset["name"]
    opts["dataset_options"] = dict(dataset.get("options") or {})
    for key in ("rate", "burstiness", "max_concurrency"):
        if key in arrivals:
            opts[key] = str(arrivals[key]) if key == "rate" else arrivals[key]
    for key in ("num_prompts", "duration", "ignore_eos", "warmup", "think_time", "temperature"):
        if key in run:
            opts[key] = run[key]
    if "backend" in data:
        opts["backend"] = data["backend"]
    if data.get("slo"):
        opts["slo"] = ",".join(f"{k}={v}" for k, v in data["slo"].items())
    opts["engine_flags"] = dict(data.get("engine") or {})
    return opts
