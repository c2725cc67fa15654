"""Tail term `request spread` (llmbench/plan/request_spread.py): the measured server's request-to-request spread
around a calibrated replay, read by the calibration and kept in open-loop questions' P90s and P99s."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.plan.simulator import simulate
from tests.test_calibration import _catalog_setup, _simulated_sweep


def test_a_replay_keeps_the_servers_request_to_request_spread_in_its_p99s(tmp_path):
    """Tail term `request spread`: a server whose requests come out x0.6-x1.6 of what its own step model gives
    them (lognormal, sigma 0.3). Its deterministic replay puts a run's P99s low; the spread read from other runs
    of it, measured beside replayed, puts them where the server did and leaves the medians alone. A calibration
    on the noisy sweep reads that spread; through `plan --results` it is a flag (`--request-spread`) that moves
    open-loop questions only, refused without --results."""
    from llmbench.plan.request_spread import RequestSpread
    from llmbench.plan.search import _merge
    from llmbench.results import RunFiles, load_records, write_result

    setup, work, rng = _catalog_setup()
    truth = setup.model.scaled(1.5)
    _simulated_sweep(tmp_path / "seen", truth, setup, work, rng, rates=(1, 3), n=300, spread=0.3)
    _simulated_sweep(tmp_path / "unseen", truth, setup, work, rng, rates=(2,), n=1500, spread=0.3)

    def replayed(folder, label):
        ok = load_records(folder, label)
        return ok, simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                            truth, setup.shape)

    seen = [replayed(tmp_path / "seen", f"rate-{rate}") for rate in (1, 3)]
    spread = RequestSpread.from_replay(*(np.concatenate(x) for x in zip(*(
        (ok["ttft"].to_numpy(), res.ttft, ok["tpot"].to_numpy()[res.multi_token], res.tpot) for ok, res in seen),
        strict=True)))
    assert 0.2 < np.std(spread.ttft) < 0.45 and 0.2 < np.std(spread.tpot) < 0.45
    ok, res = replayed(tmp_path / "unseen", "rate-2")
    plain, spread_on = _merge([res], None), _merge([res], None, spread)
    for metric in ("ttft", "tpot"):
        measured = np.percentile(ok[metric].dropna(), 99) * 1000
        assert plain[f"p99_{metric}_ms"] < 0.95 * measured  # low on nine of nine draws tried, by 8-29 %
        assert abs(spread_on[f"p99_{metric}_ms"] / measured - 1) < 0.2  # -5..+15 % on those nine
        assert spread_on[f"median_{metric}_ms"] == pytest.approx(plain[f"median_{metric}_ms"], rel=0.03)
    assert spread_on["request_throughput"] == plain["request_throughput"]
    assert spread_on["output_throughput"] == plain["output_throughput"]
    _simulated_sweep(tmp_path / "sweep", truth, setup, work, rng, rates=(1, 3), n=60, spread=0.3)
    for rate in (1, 3):  # what a sweep's results hold beside its records, for the measured capacity
        write_result(RunFiles(tmp_path / "sweep", f"rate-{rate}"), {"request_rate": rate, "completed": 60,
                                                                   "achieved_rate": rate, "saturated": None,
                                                                   "output_throughput": 100.0 * rate})

    def p99_ttft(*flags: str, question: tuple[str, ...] = ("--at-rate", "2")) -> tuple[float, str]:
        r = CliRunner().invoke(main, ["plan", "--results", str(tmp_path / "sweep"), *question, "--model",
                                      "llama-3.1-8b", "--gpu", "A100-80GB", "--no-search", "--num-prompts", "200",
                                      *flags])
        assert r.exit_code == 0, r.output
        plan = json.loads((tmp_path / "sweep" / "plan.json").read_text())
        return plan["simulated"]["point"]["p99_ttft_ms"], plan["setup"]["step_model"]

    (on, how), (off, how_off) = p99_ttft("--request-spread"), p99_ttft()
    assert on > 1.1 * off and "request spread" in how and "request spread" not in how_off
    loop = ("--concurrency", "8")  # a closed loop's tail is its queue, which the replay holds: no spread there
    assert p99_ttft("--request-spread", question=loop)[0] == p99_ttft(question=loop)[0]
    spread_read = float(re.search(r"tail requests ran x([0-9.]+)-x([0-9.]+) of the replay's TTFT", how)[2])
    assert 1.2 < spread_read < 3.0  # the sweep's own x1.6, widened by what the calibrated model itself misses
    r = CliRunner().invoke(main, ["plan", "--at-rate", "2", "--request-spread"])
    assert r.exit_code == 2 and "give --results" in r.output, r.output
