"""A benchmark session: resolve the target, build the workload, run each rate, write the results folder.

Results folder: metadata.json, one `<label>.json` per rate (vLLM `--save-result` keys plus extras),
`<label>.records.jsonl` (per request, written as they finish), `<label>.server_metrics.jsonl` (scraped
/metrics) and summary.csv (one row per rate).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmbench import __version__, arrivals, datasets
from llmbench.runner import RunConfig, RunResult, execute
from llmbench.target import BundledEngine


class BenchError(RuntimeError):
    """Something the user must fix (bad URL, unknown model, unusable dataset); one line, no traceback."""


@dataclass
class Target:
    base_url: str
    model: str
    tokenizer_dir: str | None
    bundled: bool
    server_info: dict = field(default_factory=dict)


def _get_json(url: str, api_key: str | None = None, timeout: float = 10.0) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


@contextlib.contextmanager
def open_target(base_url: str | None, model: str | None, engine_flags: dict | None, out_dir: Path | None,
                api_key: str | None = None) -> Iterator[Target]:
    """Yield a reachable target; with no base URL, a bundled engine started for the duration."""
    if base_url is None:
        log = out_dir / "engine.log" if out_dir else None
        with BundledEngine(model, engine_flags, log) as engine:
            yield describe_target(engine.url, None, api_key, bundled=True)
        return
    yield describe_target(base_url.rstrip("/"), model, api_key, bundled=False)


def describe_target(base_url: str, model: str | None, api_key: str | None, bundled: bool) -> Target:
    try:
        listed = _get_json(base_url + "/v1/models", api_key)
    except urllib.error.HTTPError as err:
        raise BenchError(f"{base_url}/v1/models answered HTTP {err.code}: is this an OpenAI-compatible server?"
                         ) from None
    except (urllib.error.URLError, OSError) as err:
        raise BenchError(f"cannot reach {base_url}: {getattr(err, 'reason', err)}") from None
    entries = listed.get("data") or []
    names = [m.get("id") for m in entries]
    if model is None:
        if not names:
            raise BenchError(f"{base_url}/v1/models lists no model; pass --model")
        model = names[0]
    elif names and model not in names:
        raise BenchError(f"model {model!r} is not served by {base_url} (it serves: {', '.join(names)})")
    root = next((m.get("root") for m in entries if m.get("id") == model), None)
    info: dict = {"models": entries}
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
        info["version"] = _get_json(base_url + "/version", api_key)
    tokenizer_dir = root if root and Path(root).is_dir() else (model if Path(model).is_dir() else None)
    return Target(base_url, model, tokenizer_dir, bundled, info)


def load_tokenizer(path: str | None, target: Target):
    """The target model's tokenizer from a local folder; the bundled model's as a stated fallback."""
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = path or target.tokenizer_dir
    if path is None:
        from llmbench.modelbuild import build_model

        path = str(build_model("small"))
        warnings.warn(f"no local tokenizer for {target.model!r}; counting lengths with the bundled model's "
                      "tokenizer (pass --tokenizer DIR for exact lengths)", stacklevel=2)
    try:
        return AutoTokenizer.from_pretrained(path), path
    except (OSError, ValueError) as err:
        raise BenchError(f"cannot load a tokenizer from {path}: {err}") from None


def quantization_mode(config: dict | None) -> str:
    """Weights and KV-cache format as the target reported them (the bundled engine's /version)."""
    if not config:
        return "not reported"
    info = config.get("quantization_info") or {}
    weights = config.get("quantization") or info.get("method") or config.get("dtype", "?")
    if info:
        weights += f" ({info['bits']}-bit, {info['path']} kernels)"
    return f"weights {weights}, KV cache {config.get('kv_cache_dtype', 'auto')}"


def label_for(rate: float, max_concurrency: int | None) -> str:
    base = "rate-inf" if math.isinf(rate) else f"rate-{rate:g}"
    return base + (f"-c{max_concurrency}" if max_concurrency else "")


def plan_offsets(rate: float, burstiness: float, seed: int, num_prompts: int | None, duration: float | None,
                 requests: list[datasets.Request] | None = None):
    """Trace timestamps when the dataset has them, else the arrival process."""
    import numpy as np

    if requests and all(r.timestamp is not None for r in requests):
        ts = np.asarray([r.timestamp for r in requests], dtype=float)
        return ts - ts.min()
    return arrivals.schedule(num_prompts or 1, rate, burstiness, seed, duration)


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version()}


def write_result(out_dir: Path, label: str, cfg: RunConfig, result: RunResult, info: datasets.DatasetInfo,
                 tokenizer_id: str, extra: dict | None = None) -> dict:
    body = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": cfg.backend,
        "backend": cfg.backend,
        "label": cfg.label or label,
        "model_id": cfg.model,
        "tokenizer_id": tokenizer_id,
        "request_rate": "inf" if math.isinf(cfg.rate) else cfg.rate,
        "burstiness": cfg.burstiness,
        "max_concurrency": cfg.max_concurrency,
        **result.metrics,
        "dataset": info.name,
        "dataset_description": info.description,
        "ignore_eos": cfg.ignore_eos,
        "seed": cfg.seed,
        "notes": result.notes,
        "llmbench_version": __version__,
        "records_file": f"{label}.records.jsonl",
        **(extra or {}),
    }
    (out_dir / f"{label}.json").write_text(json.dumps(body, indent=2, default=str))
    return body


def write_metadata(out_dir: Path, target: Target, args: dict, info: datasets.DatasetInfo, tokenizer_id: str) -> None:
    meta = {"llmbench_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "target": {"base_url": target.base_url, "model": target.model, "bundled": target.bundled,
                       **target.server_info},
            "dataset": asdict(info), "tokenizer": tokenizer_id, "machine": machine(), "args": args}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, default=str))


def write_summary(out_dir: Path, rows: list[dict]) -> None:
    import pandas as pd

    keys = ["label", "request_rate", "achieved_rate", "completed", "failed", "request_throughput",
            "request_goodput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
            "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
            "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms", "p99_send_lag_ms",
            "client_overloaded", "saturated"]
    keys += [k for k in ("spec_draft_tokens", "spec_accepted_tokens", "spec_acceptance_rate")
             if any(k in row for row in rows)]
    frame = pd.DataFrame([{k: row.get(k) for k in keys} for row in rows])
    frame.to_csv(out_dir / "summary.csv", index=False)


def run_one(out_dir: Path, cfg: RunConfig, requests, offsets, info, tokenizer_id: str, extra: dict | None = None
            ) -> dict:
    label = label_for(cfg.rate, cfg.max_concurrency)
    cfg.label = cfg.label or label
    result = execute(cfg, requests, offsets, out_dir / label)
    return write_result(out_dir, label, cfg, result, info, tokenizer_id, extra)
