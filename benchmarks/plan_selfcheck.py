"""Planner self-consistency on this machine: sweep the bundled engine at six rates, fit the step-time model
on three, predict P99 TTFT, P99 TPOT and output throughput at the other three. The sweep resets the engine's
prefix cache before each rate (each rate sends the same seeded sample); on a slower machine pass lower
--rates (the sweep stops past saturation and only measured rates are used). With --rounds N the sweep runs N
times (seeds 0..N-1, `--append`), and each rate's runs are one measurement, pooled: on a shared VM one 90 s
run's P99 moves by tens of per cent from one sweep to the next.

    python benchmarks/plan_selfcheck.py [--rates 0.5,1,1.5,2,2.5,3] [--duration 20] [--rounds 1] [--out DIR]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bundled.modelbuild import build_model  # noqa: E402
from llmbench.arrivals import parse_rates  # noqa: E402
from llmbench.machine import describe_machine  # noqa: E402
from llmbench.plan.validate import self_check  # noqa: E402
from llmbench.results import label_for, load_results  # noqa: E402


@click.command()
@click.option("--rates", default="0.5,1,1.5,2,2.5,3", show_default=True)
@click.option("--duration", default=20.0, show_default=True)
@click.option("--out", default="results/plan-selfcheck", show_default=True)
@click.option("--model", default=None, help="Checkpoint folder (default: the bundled small model, built if needed).")
@click.option("--rounds", default=1, show_default=True, help="Sweeps to run and pool, one seed each.")
@click.option("--skip-sweep", is_flag=True, help="Reuse an existing sweep in --out.")
@click.option("--drift-ablation", is_flag=True,
              help="Also predict with the calibration runs' speed drift replayed (tail term `speed drift`; not the "
                   "default: it did worse on two fresh sweeps).")
def main(rates: str, duration: float, out: str, model: str | None, rounds: int, skip_sweep: bool,
         drift_ablation: bool) -> None:
    values = parse_rates(rates)
    model = model or str(build_model("small"))  # the figures below were calibrated on it, not on the tiny default
    for seed in range(0 if skip_sweep else rounds):
        cmd = [sys.executable, "-m", "llmbench.cli", "sweep", "--rate", rates, "--duration", str(duration),
               "--out", out, "--no-progress", "--seed", str(seed), "--model", model, *(["--append"] if seed else [])]
        subprocess.run(cmd, check=True)
    measured = {r["label"] for r in load_results(Path(out))}
    asked = [label_for(r, None) for r in values]
    labels = [label for label in asked if label in measured]
    skipped = [label for label in asked if label not in measured]
    if skipped:  # a slower machine saturates sooner and the sweep stops there
        print(f"not measured (the sweep stopped as saturated): {', '.join(skipped)}")
    if len(labels) < 3:
        raise SystemExit(f"only {len(labels)} rates measured in {out}; give lower --rates")
    calibrate, predict = labels[0::2], labels[1::2]
    print(f"\nmachine: {describe_machine()}; calibrated on {', '.join(calibrate)}")
    for drift in (False, True)[:1 + drift_ablation]:
        print("\nwith the speed drift of the runs calibrated on (median of 9 draws)" if drift else
              "\nevery step at the fitted model's time")
        _table(self_check(Path(out), calibrate, predict, drift=drift))


def _table(rows: list[dict]) -> None:
    print(f"{'rate':>6} {'runs':>4} {'P99 TTFT ms meas/sim':>24} {'err':>7} {'P99 TPOT ms meas/sim':>24} {'err':>7} "
          f"{'out tok/s meas/sim':>22} {'err':>7}")
    errors, inside = [], 0
    for r in rows:
        cells, ranges = [], []
        for key in ("p99_ttft_ms", "p99_tpot_ms", "output_throughput"):
            err = r["error_" + key]
            cells.append(f"{r['measured_' + key]:>11.1f}/{r['simulated_' + key]:<11.1f} {err:>+7.1%}")
            errors.append(abs(err))
            if "range_" + key in r:
                low, high = r["range_" + key]
                inside += low <= err <= high
                ranges.append(f"{low:+.0%}/{high:+.0%}")
        print(f"{r['rate']:>6} {r['runs']:>4} " + " ".join(cells))
        print(f"{'':>6} {'':>4} {'measured 90 % range':>24} {ranges[0]:>7} {'':>24} {ranges[1]:>7}")
        if r["runs"] > 1:
            print(f"{'':>11} each run: P99 TTFT " + ", ".join(f"{x['p99_ttft_ms']:.0f}" for x in r["each_run"])
                  + " ms; P99 TPOT " + ", ".join(f"{x['p99_tpot_ms']:.1f}" for x in r["each_run"]) + " ms")
    print(f"largest error: {max(errors):.1%} (target <= 15%), median |error| {np.median(errors):.1%}; "
          f"P99s inside the measurement's own bootstrap range: {inside} of {2 * len(rows)}")


if __name__ == "__main__":
    main()
