"""Planner self-consistency on this machine: sweep the bundled engine at six rates, fit the step-time model
on three, predict P99 TTFT, P99 TPOT and output throughput at the other three. The sweep resets the engine's
prefix cache before each rate (each rate sends the same seeded sample); on a slower machine pass lower
--rates (the sweep stops past saturation and only measured rates are used).

    python benchmarks/plan_selfcheck.py [--rates 0.5,1,1.5,2,2.5,3] [--duration 20] [--out results/selfcheck]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

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
@click.option("--skip-sweep", is_flag=True, help="Reuse an existing sweep in --out.")
def main(rates: str, duration: float, out: str, model: str | None, skip_sweep: bool) -> None:
    values = parse_rates(rates)
    model = model or str(build_model("small"))  # the figures below were calibrated on it, not on the tiny default
    if not skip_sweep:
        cmd = [sys.executable, "-m", "llmbench.cli", "sweep", "--rate", rates, "--duration", str(duration),
               "--out", out, "--no-progress", "--seed", "0", "--model", model]
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
    rows = self_check(Path(out), calibrate, predict)
    print(f"\nmachine: {describe_machine()}; calibrated on {', '.join(calibrate)}")
    print(f"{'rate':>6} {'P99 TTFT ms meas/sim':>24} {'err':>7} {'P99 TPOT ms meas/sim':>24} {'err':>7} "
          f"{'out tok/s meas/sim':>22} {'err':>7}")
    worst = 0.0
    for r in rows:
        cells = []
        for key in ("p99_ttft_ms", "p99_tpot_ms", "output_throughput"):
            cells.append(f"{r['measured_' + key]:>11.1f}/{r['simulated_' + key]:<11.1f} {r['error_' + key]:>+7.1%}")
            worst = max(worst, abs(r["error_" + key]))
        print(f"{r['rate']:>6} " + " ".join(cells))
    print(f"\nlargest error: {worst:.1%} (target <= 15%)")


if __name__ == "__main__":
    main()
