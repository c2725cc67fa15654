"""Other tools' results in: real files written by vLLM 0.32 (`bench serve --save-result --save-detailed`),
SGLang 0.5.23 (`bench_serving --output-details`, then a second run without), guidellm 0.8.1, AIPerf 0.13 and
inference-perf 0.7 (two stages), each run here against the bundled engine serving llmbench-tiny at 4-10 req/s
(tests/data/foreign). Their figures must agree with each tool's own summary, their per-request records with
each tool's own per-request timings, and `report`, `gate` and `plan --results` must take them."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.foreign import ForeignFormatError, as_results_folder, read
from llmbench.results import load_metadata, load_results

DATA = Path(__file__).parent / "data" / "foreign"
SOURCES = ["vllm.json", "sglang.jsonl", "guidellm.json", "aiperf", "inference-perf"]


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= 0.01 * abs(theirs) + 1e-9


def _tool_figures() -> dict[str, list[dict]]:
    """Each tool's own summary figures, read here by each tool's own field names (ms, req/s, tok/s)."""
    vllm = json.loads((DATA / "vllm.json").read_text())
    sglang = [json.loads(line) for line in (DATA / "sglang.jsonl").read_text().splitlines()]
    bench = json.loads((DATA / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
    aiperf = json.loads((DATA / "aiperf" / "profile_export_aiperf.json").read_text())
    stages = [json.loads((DATA / "inference-perf" / f"stage_{i}_lifecycle_metrics.json").read_text()) for i in (0, 1)]
    return {
        "vllm.json": [{"median_ttft_ms": vllm["median_ttft_ms"], "p99_tpot_ms": vllm["p99_tpot_ms"],
                       "output_throughput": vllm["output_throughput"], "completed": vllm["completed"]}],
        "sglang.jsonl": [{"median_ttft_ms": s["median_ttft_ms"], "p99_e2el_ms": s["p99_e2e_latency_ms"],
                          "output_throughput": s["output_throughput"], "completed": s["completed"]} for s in sglang],
        "guidellm.json": [{"median_ttft_ms": bench["time_to_first_token_ms"]["successful"]["median"],
                           "p99_itl_ms": bench["inter_token_latency_ms"]["successful"]["percentiles"]["p99"],
                           "output_throughput": bench["output_tokens_per_second"]["successful"]["mean"],
                           "completed": bench["request_totals"]["successful"]}],
        "aiperf": [{"median_ttft_ms": aiperf["time_to_first_token"]["p50"],
                    "p99_tpot_ms": aiperf["inter_token_latency"]["p99"],
                    "output_throughput": aiperf["output_token_throughput"]["avg"],
                    "completed": aiperf["request_count"]["avg"]}],
        "inference-perf": [{"median_ttft_ms": s["successes"]["latency"]["time_to_first_token"]["median"] * 1000,
                            "p99_e2el_ms": s["successes"]["latency"]["request_latency"]["p99"] * 1000,
                            "output_throughput": s["successes"]["throughput"]["output_tokens_per_sec"],
                            "completed": s["successes"]["count"]} for s in stages],
    }


@pytest.mark.parametrize("source", SOURCES)
def test_figures_agree_with_the_tools_own_summary(source):
    folder = as_results_folder(DATA / source)
    ours = load_results(folder)
    theirs = _tool_figures()[source]
    assert len(ours) == len(theirs)
    for mine, tool in zip(ours, theirs, strict=True):
        for key, value in tool.items():
            assert _close(mine[key], value), (source, key, mine[key], value)
    assert load_metadata(folder)["imported_from"]["tool"] in {"vLLM", "SGLang", "guidellm", "AIPerf", "inference-perf"}


def test_per_request_records_match_each_tools_own_timings():
    vllm = json.loads((DATA / "vllm.json").read_text())
    records = read(DATA / "vllm.json").runs[0].records
    assert [r.ttft for r in records] == pytest.approx(vllm["ttfts"], abs=1e-9)
    assert [len(r.chunk_times) for r in records] == [len(i) + 1 for i in vllm["itls"]]
    guide = json.loads((DATA / "guidellm.json").read_text())["benchmarks"][0]["requests"]["successful"]
    records = read(DATA / "guidellm.json").runs[0].records
    assert [r.ttft * 1000 for r in records] == pytest.approx([g["time_to_first_token_ms"] for g in guide], abs=1e-3)
    lines = [json.loads(x) for x in (DATA / "aiperf" / "profile_export.jsonl").read_text().splitlines()]
    records = read(DATA / "aiperf").runs[0].records
    assert sorted(r.ttft * 1000 for r in records) == pytest.approx(
        sorted(x["metrics"]["time_to_first_token"]["value"] for x in lines), abs=1e-6)
    stages = read(DATA / "inference-perf").runs
    assert [len(s.records) for s in stages] == [8, 8]  # per_request... split over the stages in order
    assert np.median([r.ttft for r in stages[1].records]) * 1000 == pytest.approx(
        _tool_figures()["inference-perf"][1]["median_ttft_ms"], rel=1e-6)
    assert read(DATA / "sglang.jsonl").runs[1].records is None  # that run was saved without --output-details


def test_one_report_overlays_every_tool_and_gate_and_plan_take_them(tmp_path, tiny_model):
    runner = CliRunner()
    page = tmp_path / "tools.html"
    r = runner.invoke(main, ["report", *[str(DATA / s) for s in SOURCES], "--output", str(page)])
    assert r.exit_code == 0, r.output
    text = page.read_text()
    for name in ("A: vllm", "B: sglang", "C: guidellm", "D: aiperf", "E: inference-perf"):
        assert name in text
    assert text.count("imported from") >= 5 and "aggregates only" in text and "per-request records" in text
    r = runner.invoke(main, ["gate", "--baseline", str(DATA / "vllm.json"), "--current", str(DATA / "aiperf"),
                             "--summary", str(tmp_path / "g.md"), "--junit", str(tmp_path / "g.xml")])
    assert r.exit_code in (0, 1, 4) and "rate-5" in (tmp_path / "g.md").read_text(), r.output
    r = runner.invoke(main, ["plan", "--qps", "20", "--results", str(DATA / "inference-perf"), "--model",
                             str(tiny_model / "config.json"), "--gpu", "H100", "--out", str(tmp_path / "plan.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "plan.json").read_text())["answer"]


def test_an_unknown_file_is_a_clear_error(tmp_path):
    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": 1}')
    with pytest.raises(ForeignFormatError, match="not a result file of vLLM, SGLang, guidellm"):
        as_results_folder(odd)
    r = CliRunner().invoke(main, ["report", str(odd)])
    assert r.exit_code == 2 and "not a result file" in r.output


def test_an_imported_folder_lives_as_long_as_the_process(tmp_path):
    """Each `report`/`gate`/`plan` of a foreign file converts it under a temporary directory; it must go when
    the process ends (stop 44 found 181 of them left in /tmp), and not before."""
    import subprocess
    import sys

    code = ("import sys; from llmbench.foreign import as_results_folder; from llmbench.results import load_results; "
            "f = as_results_folder(sys.argv[1]); assert load_results(f); print(f)")
    proc = subprocess.run([sys.executable, "-c", code, str(DATA / "vllm.json")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    folder = Path(proc.stdout.strip())
    assert folder.name == "vllm" and not folder.parent.exists()
