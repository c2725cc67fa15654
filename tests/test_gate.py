"""Gates on generated per-request samples: real regressions fail, reruns of the same distribution pass."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench import gate as g
from llmbench import gate_report
from llmbench.cli import main


def make_run(rng, n=600, ttft_scale=1.0, tpot_scale=1.0, label="rate-10"):
    ttft = rng.lognormal(np.log(200), 0.5, n) * ttft_scale
    tpot = rng.lognormal(np.log(40), 0.25, n) * tpot_scale
    tokens = rng.integers(50, 400, n).astype(float)
    e2el = ttft + tpot * (tokens - 1)
    samples = {"ttft": ttft, "tpot": tpot, "e2el": e2el, "itl": tpot, "tokens": tokens}
    duration = 60.0 * tpot_scale
    metrics = {"output_throughput": tokens.sum() / duration}
    for name in ("ttft", "tpot", "e2el", "itl"):
        v = samples[name]
        metrics |= {f"mean_{name}_ms": v.mean(), f"median_{name}_ms": np.median(v),
                    f"p90_{name}_ms": np.percentile(v, 90), f"p99_{name}_ms": np.percentile(v, 99)}
    return {label: g.Run(label, metrics, samples, duration, "m", "sharegpt")}


TOL = g.parse_tolerances("p99_ttft=10%,p99_tpot=10%,output_throughput=5%")


def test_injected_regression_fails():
    rng = np.random.default_rng(0)
    base = make_run(rng)
    worse = make_run(rng, ttft_scale=1.2)
    result = g.compare(base, worse, TOL)
    verdicts = {c.metric: c.verdict for c in result.checks}
    assert verdicts["p99_ttft"] == "regression" and result.exit_code == 1
    assert verdicts["p99_tpot"] == "pass"


def test_small_runs_are_inconclusive_not_passed():
    """Two 200-request runs of one distribution: a P99 cannot resolve 10%, so the gate says so (exit 4) and how
    many requests would; the median TPOT of the same runs can, and passes."""
    rng = np.random.default_rng(5)
    base, again = make_run(rng, n=200), make_run(rng, n=200)
    result = g.compare(base, again, g.parse_tolerances("p99_ttft=10%,median_tpot=10%"))
    checks = {c.metric: c for c in result.checks}
    assert checks["p99_ttft"].verdict == "inconclusive" and checks["p99_ttft"].detectable > 0.10
    assert checks["p99_ttft"].needed > 200 and checks["median_tpot"].verdict == "pass"
    assert result.exit_code == g.EXIT_INCONCLUSIVE
    text = gate_report.markdown(result)
    assert "⚠️ inconclusive" in text and "requests per run would detect 10%" in text
    result.allow_inconclusive = True
    assert result.exit_code == 0
    worse = make_run(rng, n=200, ttft_scale=1.6)  # a regression far beyond what the runs can resolve still fails
    assert g.compare(base, worse, g.parse_tolerances("p99_ttft=10%")).exit_code == g.EXIT_REGRESSION


def test_false_failure_rate_over_50_reruns():
    rng = np.random.default_rng(1)
    base = make_run(rng)
    failures = sum(g.compare(base, make_run(rng), TOL, rounds=500, seed=i).exit_code == g.EXIT_REGRESSION
                   for i in range(50))
    assert failures <= 2


def test_throughput_drop_fails():
    rng = np.random.default_rng(2)
    base = make_run(rng)
    slower = make_run(rng, tpot_scale=1.25)  # longer duration for the same tokens
    result = g.compare(base, slower, TOL)
    assert {c.metric for c in result.checks if c.verdict == "regression"} >= {"output_throughput", "p99_tpot"}


def test_vllm_save_result_as_baseline(tmp_path):
    rng = np.random.default_rng(3)
    n = 300
    ttfts = rng.lognormal(np.log(0.2), 0.4, n)
    itls = [list(rng.lognormal(np.log(0.04), 0.2, 20)) for _ in range(n)]
    vllm = {"date": "20260101-000000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": n, "request_rate": 10.0,
            "burstiness": 1.0, "max_concurrency": None, "duration": 30.0, "completed": n, "failed": 0,
            "total_input_tokens": 60000, "total_output_tokens": 21 * n, "request_throughput": n / 30,
            "output_throughput": 21 * n / 30, "total_token_throughput": (60000 + 21 * n) / 30,
            "mean_ttft_ms": float(ttfts.mean() * 1000), "median_ttft_ms": float(np.median(ttfts) * 1000),
            "p99_ttft_ms": float(np.percentile(ttfts, 99) * 1000), "mean_tpot_ms": 40.0, "median_tpot_ms": 40.0,
            "p99_tpot_ms": 55.0, "input_lens": [200] * n, "output_lens": [21] * n, "ttfts": list(ttfts),
            "itls": itls}
    path = tmp_path / "vllm-10.0qps-Llama-3.1-8B-20260101-000000.json"
    path.write_text(json.dumps(vllm))
    runs = g.load_runs(path)
    run = runs["rate-10"]
    assert run.samples["ttft"].size == n and run.samples["tpot"].size == n
    same = g.compare(runs, runs, TOL)
    assert same.exit_code in (0, g.EXIT_INCONCLUSIVE) and all(c.method == "bootstrap" for c in same.checks)
    assert not any(c.verdict == "regression" for c in same.checks)
    summary_only = dict(vllm)
    for key in ("ttfts", "itls", "input_lens", "output_lens"):
        summary_only.pop(key)
    path2 = tmp_path / "summary.json"
    path2.write_text(json.dumps(summary_only | {"p99_ttft_ms": vllm["p99_ttft_ms"] * 1.3}))
    result = g.compare(runs, g.load_runs(path2), TOL)
    assert result.exit_code == 1 and any("thresholds only" in w for w in result.warnings)


def test_cli_exit_codes_and_outputs(tmp_path, scripted, tiny_model):
    # a 50 ms TTFT: with a 5 ms one this failed once under -n 2 on a 2-core machine (unreproduced alone); a P99 of
    # 5 ms moves 50 % with a few ms of scheduling, one of 50 ms does not
    fast = scripted("--ttft-ms", "50", "--itl-ms", "5")
    runner = CliRunner()
    folders = []
    for name in ("a", "b"):
        out = tmp_path / name
        r = runner.invoke(main, ["run", "--base-url", fast.url, "--tokenizer", str(tiny_model), "--rate", "30",
                                 "--num-prompts", "60", "--output-len", "10", "--out", str(out), "--no-progress"])
        assert r.exit_code == 0, r.output
        folders.append(out)
    summary, junit = tmp_path / "s.md", tmp_path / "j.xml"
    r = runner.invoke(main, ["gate", "--baseline", str(folders[0]), "--current", str(folders[1]),
                             "--max-regression", "p99_ttft=50%,output_throughput=20%", "--summary", str(summary),
                             "--junit", str(junit), "--allow-inconclusive"])
    assert r.exit_code == 0, r.output
    assert "✅ pass" in summary.read_text() and 'failures="0"' in junit.read_text()
    baseline = tmp_path / "baseline.json"
    r = runner.invoke(main, ["gate", "--baseline", str(baseline), "--current", str(folders[0]), "--update-baseline"])
    assert r.exit_code == 0 and baseline.stat().st_size < 200_000
    r = runner.invoke(main, ["gate", "--baseline", str(baseline), "--current", str(folders[1]), "--summary",
                             str(summary), "--junit", str(junit), "--max-regression",
                             "p99_ttft=50%,output_throughput=20%"])  # two runs of a few ms: wide bounds
    assert r.exit_code in (0, 4), r.output
    assert ("inconclusive" in summary.read_text()) == (r.exit_code == 4)
    r = runner.invoke(main, ["gate", "--baseline", str(tmp_path / "nope"), "--current", str(folders[1])])
    assert r.exit_code == 2 and "no such file" in r.output
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"completed": 1, "request_rate": 99, "p99_ttft_ms": 1.0}))
    r = runner.invoke(main, ["gate", "--baseline", str(other), "--current", str(folders[1])])
    assert r.exit_code == 2 and "nothing comparable" in r.output


def test_mismatch_warns():
    rng = np.random.default_rng(4)
    base = make_run(rng)
    cur = make_run(rng)
    cur["rate-10"].model = "other-model"
    result = g.compare(base, cur, TOL)
    assert any("model differs" in w for w in result.warnings)
    assert "model differs" in gate_report.markdown(result)


def test_a_run_that_found_its_prompts_cached_is_not_like_for_like():
    """vLLM-CPU: a run after a sweep of the same seed found 72 % of its prompt tokens cached (P99 TTFT -74 %)."""
    rng = np.random.default_rng(5)
    base, cur = make_run(rng), make_run(rng, ttft_scale=0.3)
    base["rate-10"].metrics["server_prefix_hit_rate"] = 0.0
    cur["rate-10"].metrics["server_prefix_hit_rate"] = 0.72
    said = [w for w in g.compare(base, cur, TOL).warnings if "prefix cache" in w]
    assert said == ["rate-10: the server found 0% of the baseline run's, 72% of the current run's prompt tokens in "
                    "its prefix cache: not like for like (a cache left warm by an earlier run flatters TTFT and "
                    "throughput; reset it or draw another --seed)"]
    cur["rate-10"].metrics["server_prefix_hit_rate"] = 0.08  # a chat preamble's block or two: alike
    assert not any("prefix cache" in w for w in g.compare(base, cur, TOL).warnings)
    del base["rate-10"].metrics["server_prefix_hit_rate"]  # a baseline from before the count: the current's alone
    cur["rate-10"].metrics["server_prefix_hit_rate"] = 0.72
    assert any("72% of the current run's" in w for w in g.compare(base, cur, TOL).warnings)


def test_bad_tolerances():
    for bad in ("p99_ttft", "latency=5%", "p99_ttft=-1%"):
        with pytest.raises(ValueError):
            g.parse_tolerances(bad)


def _folder(path, seed, stall=None, said=True, scale=1.0):
    """A results folder of 400 requests at 10 req/s, 50 tokens 20 ms apart; `stall`: the client stopped from
    stall[0] to stall[1] s, so every chunk that came then was read at its end (recorded in the JSON if `said`)."""
    from llmbench.metrics import compute
    from llmbench.records import RecordWriter, RequestRecord, read_records
    from llmbench.results import RunFiles, write_result

    rng = np.random.default_rng(seed)
    files = RunFiles(path, "rate-10")
    writer = RecordWriter(files.records)
    for i, start in enumerate(np.cumsum(rng.exponential(0.1, 400))):
        chunks = [start + rng.lognormal(np.log(0.1), 0.3) * scale + k * 0.02 for k in range(50)]
        if stall:
            chunks = [stall[1] if stall[0] <= t < stall[1] else t for t in chunks]
        writer.write(RequestRecord(i, start, start, start, chunks[-1], chunks, success=True, output_tokens=50))
    writer.close()
    body = compute(read_records(files.records), None, (50, 99), None, 10.0) | {"request_rate": 10}
    write_result(files, body | ({"client_stall_intervals": [list(stall)]} if stall and said else {}))
    return path


def test_a_regression_only_the_clients_own_stall_shows_fails_no_one(tmp_path):
    """The current run's client stopped for 2 s (its process starved of CPU): the requests in flight read their
    first tokens when it ended, and its P99 TTFT rose far past 10 %. Unrecorded, that fails CI as a regression;
    recorded, the gate reads the runs with the client's wait taken out as well, finds no regression there, and
    says the check is inconclusive (exit 4) and why. A real regression (every TTFT 1.5x) still fails with it."""
    base = g.load_runs(_folder(tmp_path / "base", 1))
    tol = g.parse_tolerances("p99_ttft=10%,median_tpot=10%")
    unsaid = g.compare(base, g.load_runs(_folder(tmp_path / "unsaid", 2, (20.0, 22.0), said=False)), tol)
    assert {c.metric: c.verdict for c in unsaid.checks}["p99_ttft"] == "regression" and unsaid.exit_code == 1
    said = g.compare(base, g.load_runs(_folder(tmp_path / "said", 2, (20.0, 22.0))), tol)
    check = {c.metric: c for c in said.checks}["p99_ttft"]
    assert check.verdict == "inconclusive" and "a regression as timed, none with the client's own stalls" in check.why
    assert said.exit_code == g.EXIT_INCONCLUSIVE and {c.metric: c.verdict for c in said.checks}["median_tpot"] == "pass"
    text = gate_report.markdown(said)
    assert "the load generator itself stalled" in text and "run sizes" not in text
    assert "inconclusive: a regression as timed" in gate_report.junit(said)
    kept = g.load_runs(g.write_baseline(g.load_runs(tmp_path / "said"), tmp_path / "said.json"))
    assert kept["rate-10"].without_stalls is not None  # a baseline written from it keeps both readings
    assert {c.metric: c.verdict for c in g.compare(base, kept, tol).checks}["p99_ttft"] == "inconclusive"
    worse = g.compare(base, g.load_runs(_folder(tmp_path / "worse", 2, (20.0, 22.0), scale=1.5)), tol)
    assert {c.metric: c.verdict for c in worse.checks}["p99_ttft"] == "regression" and worse.exit_code == 1
