"""The planner's calibrated path on a server written elsewhere (vLLM-CPU serving llmbench-small): calibrate the
roofline on some measured rates of one sweep, then predict, by replaying each other rate's own arrivals and
lengths (a closed loop's own lengths in the order it sent them), its P50/P99 TTFT and TPOT, and set the errors
beside the measurement's own spread: each figure's 90 % bootstrap range over its run's requests, and the same rate
measured in two sweeps of the same server where given.

    python benchmarks/foreign_calibration.py --calibrate SWEEP_A:rate-1,rate-3,rate-5 \
        --predict SWEEP_B:rate-2,rate-4,rate-6 --gpu-spec cpu.json [--model CONFIG_OR_FOLDER]

Sweeps come from `llmbench sweep --base-url http://...` against the server (peers.md has the vLLM-CPU recipe).
A rate measured in several runs (`sweep --append` in rounds, each round every rate in a new order, so that a slow
drift of the server or its host spreads over every rate instead of landing on whichever ran then) is one figure:
its runs' requests pooled, each run replayed on its own arrivals; name all its labels.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmbench.machine import describe_machine  # noqa: E402
from llmbench.plan.calibrate import calibrate  # noqa: E402
from llmbench.plan.handover import handover_steps  # noqa: E402
from llmbench.plan.loop_overhead import loop_overhead  # noqa: E402
from llmbench.plan.planner import PlanRequest, catalog_replica  # noqa: E402
from llmbench.plan.request_spread import RequestSpread  # noqa: E402
from llmbench.plan.simulator import simulate  # noqa: E402
from llmbench.plan.workload import from_results, sent_times  # noqa: E402
from llmbench.records import read_records  # noqa: E402
from llmbench.results import RunFiles, load_records, load_results, records_path, runs_by_rate  # noqa: E402
from llmbench.slo import SLO  # noqa: E402

KEYS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


def _split(text: str) -> tuple[Path, list[str]]:
    folder, _, labels = text.partition(":")
    return Path(folder), [x for x in labels.split(",") if x]


def _measured(folder: Path, labels: str | list[str]):
    """The successful requests past their warm-up of one run, or of several runs pooled (each keeps its `label`)."""
    frame = pd.concat([load_records(folder, label) for label in ([labels] if isinstance(labels, str) else labels)],
                      ignore_index=True)
    return frame[frame["success"] & ~frame["warmup"].astype(bool)]


def _figures(ttft: np.ndarray, tpot: np.ndarray) -> dict:
    return {"median_ttft_ms": np.percentile(ttft, 50) * 1000, "p99_ttft_ms": np.percentile(ttft, 99) * 1000,
            "median_tpot_ms": np.percentile(tpot, 50) * 1000, "p99_tpot_ms": np.percentile(tpot, 99) * 1000,
            "mean_ttft_ms": ttft.mean() * 1000}


def _replay(ok, model, shape, concurrency: int | None = None, spread: RequestSpread | None = None) -> dict:
    """The runs' own requests through the simulator, each run (`label`) on its own: an open loop at its own
    arrival times, a closed loop (`concurrency`) in the order it sent them; the runs' requests pooled. With a
    `spread` (the calibration's tail term `request spread`) an open loop's requests carry it, as a plan's do."""
    results = []
    for _, run in ok.groupby("label", sort=False):
        if concurrency:
            run = run.sort_values(["start", "index"])
        arrivals = None if concurrency else sent_times(run)
        res = simulate(arrivals, run["prompt_len"].to_numpy(), run["output_tokens"].to_numpy(), model, shape,
                       concurrency=concurrency)
        results.append(spread.apply(res, len(results)) if spread is not None and not concurrency else res)
    return _figures(np.concatenate([r.ttft for r in results]), np.concatenate([r.tpot for r in results]))


def _real(ok) -> dict:
    """The measured figures from the (pooled) records, as the results files compute them for one run."""
    return _figures(ok["ttft"].to_numpy(dtype=float), ok["tpot"].dropna().to_numpy(dtype=float))


def _by_rate(results: dict, names: list[str]) -> dict[str, list[str]]:
    """`names` grouped by their measured rate (`--append` runs of one rate: rate-2, rate-2-run2, ...), each group
    named by its first run."""
    return {runs[0]["label"]: [r["label"] for r in runs]
            for runs in runs_by_rate(results[label] for label in names).values()}


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
@click.option("--calibrate", "calibrate_on", required=True,
              help="FOLDER:label,label,... to calibrate on (runs of one rate pooled).")
@click.option("--predict", "predict_on", required=True, multiple=True,
              help="FOLDER:label,... to predict (runs of one rate pooled).")
@click.option("--gpu-spec", required=True, type=click.Path(exists=True, dir_okay=False), help="The device.")
@click.option("--model", default=None, help="The served model's config.json (default: the bundled small model).")
@click.option("--concurrency", "concurrency_on", default=None,
              help="FOLDER:label,... of --max-concurrency runs (pooled).")
@click.option("--per-sequence/--no-per-sequence", default=True, show_default=True,
              help="Fit the cost per sequence a step (decode-only token gaps, else the top rate; off: one scale).")
@click.option("--step-jitter/--no-step-jitter", default=False, show_default=True,
              help="Every replayed step gets one of the calibration's decode-only gap offsets added (tail term "
                   "`step jitter`).")
@click.option("--loop-overhead-from", default=None,
              help="FOLDER:label,... of closed loops the server timed (`server_timings.py`): every replayed loop "
                   "request carries their mean client-over-server TTFT less the calibration runs' (tail term `loop "
                   "overhead`).")
@click.option("--request-spread/--no-request-spread", default=False, show_default=True,
              help="Open-loop replays carry the calibration's request-to-request spread (tail term `request "
                   "spread`).")
def main(calibrate_on: str, predict_on: tuple[str, ...], gpu_spec: str, model: str | None,
         concurrency_on: str | None, per_sequence: bool, request_spread: bool, step_jitter: bool,
         loop_overhead_from: str | None) -> None:
    if model is None:
        from bundled.modelbuild import build_model

        model = str(build_model("small") / "config.json")
    folder, labels = _split(calibrate_on)
    work = from_results(folder)
    rep = catalog_replica(PlanRequest(slo=SLO(), gpu_spec=Path(gpu_spec), model=model, results=folder), work)
    kept = {r["label"] for r in load_results(folder)}
    subset = folder if set(labels) == kept else _only(folder, labels)
    rates = len(_by_rate({r["label"]: r for r in load_results(folder)}, labels))
    cal = calibrate(subset, rep.setup.model, rep.setup.shape, rates=rates, per_sequence=per_sequence,
                    step_jitter=step_jitter)
    sim_model = cal.apply(rep.setup.model)
    shape = dataclasses.replace(rep.setup.shape, client_overhead=cal.request_overhead, step_jitter=cal.step_jitter)
    spread = cal.spread if request_spread else None
    if loop_overhead_from:
        where, loops = _split(loop_overhead_from)
        timed = [r for r in load_results(folder) if r["label"] in labels] + [
            r for r in load_results(where) if r["label"] in loops]
        extra = loop_overhead(timed)
        if extra is None:
            raise click.UsageError(f"{loop_overhead_from}: no closed loop and open rate whose server timed its "
                                   "requests")
        shape = dataclasses.replace(shape, loop_overhead=extra)
        print(f"loop overhead: {extra * 1000:.1f} ms (client over server TTFT, {', '.join(loops)} less the "
              "calibration runs')")
    print(f"machine: {describe_machine()}; {cal.describe()}" + (f"; {spread.describe()}" if spread else ""))
    print(f"{'run':<22}" + "".join(f"{k + ' meas/sim':>28}{'err':>8}" for k in KEYS))
    errors = {k: [] for k in KEYS}
    tally: list[tuple[bool, bool]] = []
    measured_by_rate: dict[float, list[dict]] = {}
    for text in predict_on:
        where, names = _split(text)
        results = {r["label"]: r for r in load_results(where)}
        for label, runs in _by_rate(results, names).items():
            ok = _measured(where, runs)
            real, sim = _real(ok), _replay(ok, sim_model, shape, spread=spread)
            measured_by_rate.setdefault(float(results[label]["request_rate"]), []).append(real)
            for k in KEYS:
                errors[k].append(abs((sim[k] - real[k]) / real[k]))
            print(_row(_name(where, label, runs), real, sim, _spread(ok), tally))
            _blocks(ok)
            _server_clock([results[r] for r in runs], real, sim, shape.client_overhead)
            _stalls([results[r] for r in runs])
            _handover(where, runs)
    if concurrency_on:
        where, names = _split(concurrency_on)
        result = {r["label"]: r for r in load_results(where)}[names[0]]
        ok = _measured(where, names)
        real, sim = _real(ok), _replay(ok, sim_model, shape, int(result["max_concurrency"]), spread)
        print(_row(_name(where, names[0], names), real, sim, _spread(ok), tally))
        _blocks(ok)
        _server_clock([r for r in load_results(where) if r["label"] in names], real, sim,
                      shape.client_overhead + shape.loop_overhead)
        _stalls([r for r in load_results(where) if r["label"] in names])
        _handover(where, names, int(result["max_concurrency"]))
    print("median |error| over the open rates: " + ", ".join(f"{k} {np.median(v):.0%}" for k, v in errors.items()))
    print(f"predicted figures within 15 %: {sum(a for a, _ in tally)} of {len(tally)}; inside the measurement's own "
          f"90 % range (bootstrap over the run's requests): {sum(b for _, b in tally)} of {len(tally)}")
    for rate, runs in sorted(measured_by_rate.items()):
        if len(runs) > 1:
            print(f"the measurement itself at {rate:g} req/s, sweep to sweep: " + ", ".join(
                f"{k} {min(r[k] for r in runs):.1f}-{max(r[k] for r in runs):.1f} "
                f"(x{max(r[k] for r in runs) / min(r[k] for r in runs):.2f})" for k in KEYS)
                + ": no prediction can be judged finer than this spread")


def _name(where: Path, label: str, runs: list[str]) -> str:
    return f"{where.name} {label}" + (f" x{len(runs)}" if len(runs) > 1 else "")


def _blocks(ok) -> None:
    """Where a figure pools several runs, each run's median TPOT: how far the server itself moved between them."""
    if ok["label"].nunique() > 1:
        print("  each run's median TPOT, ms: " + ", ".join(
            f"{run['tpot'].median() * 1000:.1f}" for _, run in ok.groupby("label", sort=False)))


def _server_clock(runs: list[dict], real: dict, sim: dict, overhead_s: float) -> None:
    """The mean TTFT by the server's own clock (server_timings.py) beside the client's and the replay's, the
    replay's less the calibration's request overhead: whether a miss is the engine's (replay against the server's
    clock) or the front end's (client against server). Said only where every run's server timed its requests."""
    if not runs or any(r.get("client_over_server_ttft_ms") is None for r in runs):
        return
    timed = sum(r["server_timed_ttft"] for r in runs)
    server = sum(r["server_mean_ttft_ms"] * r["server_timed_ttft"] for r in runs) / timed
    engine = sim["mean_ttft_ms"] - overhead_s * 1000
    print(f"  mean TTFT, ms: the client's {real['mean_ttft_ms']:.1f}, the server's own {server:.1f} (client "
          f"{real['mean_ttft_ms'] - server:+.1f}); the replay's {sim['mean_ttft_ms']:.1f}, less its request overhead "
          f"{engine:.1f} ({engine / server - 1:+.0%} on the server's clock)")


def _stalls(runs: list[dict]) -> None:
    """The load generator's own stalls in the runs of a figure (the measured side is timed as it was)."""
    count = sum(r.get("client_stalls") or 0 for r in runs)
    if count:
        print(f"  client stalls over 100 ms: {count} (longest {max(r.get('max_client_stall_ms') or 0 for r in runs):.0f}"
              f" ms), {sum(r.get('requests_in_client_stalls') or 0 for r in runs)} requests inside one")


def _handover(where: Path, labels: list[str], skip: int = 0) -> None:
    """The steps the figure's requests waited to join the batch, counted without a model (handover.py), and the
    share that waited four or more: the replay's loop turnaround makes a loop newcomer's 2, an open loop's 2 and its
    front-end ingest's share."""
    results = {r["label"]: r for r in load_results(where)}
    counts = np.concatenate([handover_steps(read_records(records_path(where, results[label])), skip)
                             for label in labels])
    if len(counts):
        print(f"  steps to join (another stream's tokens between a request's send and its first token): mean "
              f"{counts.mean():.2f} over {len(counts)} requests" + (" past the opening burst" if skip else "")
              + f", {(counts >= 4).mean():.0%} four or more")


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
