"""The planner: published figures reproduced by the unmeasured path, measured plans, clear errors."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.plan import catalog
from llmbench.plan.memory import GiB, plan_memory
from llmbench.plan.planner import PlanError, measured_capacity
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import EngineShape, simulate
from llmbench.slo import SLO, SLOError, parse_slo

H100 = catalog.gpu("H100-SXM")
EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "example"


def test_catalog_params_and_kv():
    expected = {"llama-2-7b": (6.74, 512), "llama-2-70b": (68.98, 320), "llama-3.1-8b": (8.03, 128),
                "qwen2.5-0.5b": (0.49, 12), "qwen2.5-7b": (7.62, 56), "mistral-7b": (7.24, 128),
                "mixtral-8x7b": (46.70, 128), "deepseek-v3": (671.0, 68.625)}
    for name, (params_b, kv_kib) in expected.items():
        m = catalog.model(name)
        assert m.params / 1e9 == pytest.approx(params_b, abs=0.01), name
        assert m.kv_bytes_per_token(2) / 1024 == pytest.approx(kv_kib, rel=1e-3), name
    assert catalog.model("mixtral-8x7b").active_params / 1e9 == pytest.approx(12.88, abs=0.01)


def test_row_e_vllm_memory_within_5_percent():
    """planning.md row E: Llama-3.1-8B on H100, u=0.9 -> KV 51.38 GiB; 70B FP8 TP2 -> 33.88 GiB weights/GPU,
    KV 32.0 GiB; TP1 does not fit."""
    m8 = plan_memory(catalog.model("llama-3.1-8b"), H100, 1, "bf16", "bf16")
    assert m8.weights_per_gpu / GiB == pytest.approx(14.99, rel=0.02)
    assert m8.kv_per_gpu / GiB == pytest.approx(51.38, rel=0.05)
    m70 = plan_memory(catalog.model("llama-3.1-70b"), H100, 2, "fp8", "bf16")
    assert m70.weights_per_gpu / GiB == pytest.approx(33.88, rel=0.02)
    assert m70.kv_per_gpu / GiB == pytest.approx(32.0, rel=0.05)
    assert not plan_memory(catalog.model("llama-3.1-70b"), H100, 1, "fp8", "bf16").fits


@pytest.mark.parametrize("gpu, isl, osl, published", [
    ("H100-SXM", 128, 128, 28312), ("H100-SXM", 1000, 1000, 15220), ("H100-SXM", 2048, 128, 3450),
    ("H100-SXM", 5000, 500, 3459), ("H200", 128, 128, 27911), ("H200", 1000, 1000, 17744),
    ("H200", 2048, 128, 3538), ("H200", 5000, 500, 3902)])
def test_row_b_max_throughput_within_35_percent(gpu, isl, osl, published):
    """planning.md row B (TRT-LLM, Llama-3.1-8B FP8, TP1, infinite rate). Stated tolerance: ±35% for prompts
    up to 5,000 tokens; the 20,000-token row is under-predicted about 2-2.6x (documented limitation)."""
    g, m = catalog.gpu(gpu), catalog.model("llama-3.1-8b")
    mem = plan_memory(m, g, 1, "fp8", "fp8")
    n = 800
    res = simulate(np.zeros(n), np.full(n, isl), np.full(n, osl), RooflineModel(m, g, 1, "fp8", "fp8"),
                   EngineShape(2048, 8192, mem.kv_tokens, 16))
    assert res.output_tokens / res.duration / published == pytest.approx(1.0, abs=0.35)


def test_row_c_single_stream_and_knee():
    """planning.md row C (NIM, Llama-3.3-70B FP8 TP2 on H100, 5000 in / 500 out): C=1 TTFT 407 ms and ITL
    18.6 ms within 20%; the knee: TTFT jumps several-fold from C=50 to C=100."""
    m = catalog.model("llama-3.1-70b")
    roof = RooflineModel(m, H100, 2, "fp8", "fp8")
    shape = EngineShape(256, 8192, plan_memory(m, H100, 2, "fp8", "fp8").kv_tokens, 16)

    def run(c):
        n = max(4 * c, 20)
        return simulate(None, np.full(n, 5000), np.full(n, 500), roof, shape, concurrency=c).summary()

    one = run(1)
    assert one["median_ttft_ms"] == pytest.approx(407, rel=0.2)
    assert one["median_tpot_ms"] == pytest.approx(18.6, rel=0.2)
    assert run(100)["median_ttft_ms"] > 4 * run(50)["median_ttft_ms"]


def test_simulator_preempts_when_kv_is_short():
    roof = RooflineModel(catalog.model("llama-3.1-8b"), H100)
    n = 64
    res = simulate(np.zeros(n), np.full(n, 500), np.full(n, 300), roof, EngineShape(64, 4096, 12000, 16))
    assert len(res.ttft) == n and res.preemptions > 0


def test_parse_slo():
    slo = parse_slo("ttft=500ms,tpot=0.05s", 0.95)
    assert (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms, slo.attainment) == (500, 50, None, 0.95)
    with pytest.raises(SLOError):
        parse_slo("latency=5s", 0.99)


def test_unmeasured_plan_cli(tmp_path):
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", "--qps", "50", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads(out.read_text())
    sim = plan["simulated"]
    assert sim["gpus"] >= 2 and sim["per_replica_rate_band"][0] <= sim["per_replica_rate"] <= \
        sim["per_replica_rate_band"][1]
    assert plan["estimates"] and "estimate" in r.output
    assert "--max-num-seqs" in sim["recommended_flags"] and plan["cost"]["usd_per_hour"] > 0


@pytest.mark.parametrize("args, message", [
    (["--gpu", "TPUv9"], "unknown GPU 'TPUv9'"),
    (["--model", "gpt-5"], "unknown model 'gpt-5'"),
    (["--model", "deepseek-v3", "--gpu", "L4"], "does not fit L4 at any TP up to 8"),
])
def test_plan_errors(args, message, tmp_path):
    r = CliRunner().invoke(main, ["plan", "--qps", "10", "--out", str(tmp_path / "p.json"), *args])
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output


def test_measured_plan_from_scripted_sweep(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "20", "--itl-ms", "2")
    out = tmp_path / "sweep"
    r = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate",
                                  "5,10,20", "--duration", "2", "--output-len", "8", "--out", str(out),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    cap = measured_capacity(out, SLO(ttft_ms=1000, tpot_ms=50))
    assert cap["per_replica_rate"] == pytest.approx(20) and "lower bound" in cap["note"]
    r = CliRunner().invoke(main, ["plan", "--qps", "100", "--results", str(out), "--slo", "ttft=1s,tpot=50ms",
                                  "--spares", "0", "--burst-headroom", "0"])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["measured"]["replicas"] == 5 and "throughput_formula_gpus" in plan["article_formulas"]
    from llmbench.report import build_report

    page = build_report([out], tmp_path / "report.html").read_text()
    assert 'id="plan"' in page and "req/s per replica" in page
    r = CliRunner().invoke(main, ["plan", "--qps", "100", "--results", str(out), "--slo", "ttft=5ms"])
    assert r.exit_code == 1 and "not met even at the lowest measured rate 5 req/s" in r.output


def test_fit_recovers_a_concave_decode_cost_and_extrapolates():
    from llmbench.plan.fit import fit_steps

    def truth(p, d, ps, ctx):
        return 0.010 + 0.003 * np.log2(1 + d) + 0.0003 * p + 0.001 * ps + 2e-6 * ctx

    rng = np.random.default_rng(0)
    steps = []
    for _ in range(2000):
        d = int(rng.integers(0, 40))
        p = int(rng.choice([0, 0, 0, int(rng.integers(1, 1500))]))
        ps = int(p > 0) + int(p > 800)
        ctx = int(d * rng.integers(50, 800))
        steps.append({"step_seconds": truth(p, d, ps, ctx) * rng.normal(1, 0.02), "num_prefill_tokens": p,
                      "num_decode_tokens": d, "num_seqs": d + ps, "num_context_tokens": ctx})
    model = fit_steps(steps)
    for p, d, ps, ctx in [(0, 1, 0, 300), (0, 12, 0, 5000), (500, 6, 1, 2000), (0, 50, 0, 20000)]:
        got = model.step_time(p, d, ctx, 0, ps)
        assert got == pytest.approx(truth(p, d, ps, ctx + p), rel=0.08), (p, d, got)
    assert model.rel_error < 0.05


def test_self_check_on_the_bundled_engine(tiny_model, tmp_path):
    """The planner's simulator, calibrated on two measured rates, predicts two others (loose bounds: short
    runs on a shared 2-core runner; benchmarks/plan_selfcheck.py holds the 15 % target). The rates are
    fractions of the capacity measured first on this machine, so a slower machine sweeps lower rates."""
    from llmbench.plan.validate import self_check

    probe = tmp_path / "probe"
    common = ["--model", str(tiny_model), "--output-len", "64", "--no-progress"]  # fixed lengths: a stable probe
    r = CliRunner().invoke(main, ["run", *common, "--rate", "inf", "--num-prompts", "64", "--out", str(probe),
                                  "--seed", "1"])
    assert r.exit_code == 0, r.output
    capacity = json.loads((probe / "rate-inf.json").read_text())["request_throughput"]
    rates = [round(capacity * f, 2) for f in (0.2, 0.35, 0.5, 0.65)]
    out = tmp_path / "sweep"
    r = CliRunner().invoke(main, ["sweep", *common, "--rate", ",".join(map(str, rates)),
                                  "--duration", str(max(5.0, 20 / rates[0])), "--out", str(out), "--seed", "0"])
    assert r.exit_code == 0, r.output
    labels = [f"rate-{rate:g}" for rate in rates]
    rows = self_check(out, labels[0::2], labels[1::2])
    for row in rows:
        print(row)
        assert abs(row["error_output_throughput"]) < 0.25
        assert abs(row["error_p99_tpot_ms"]) < 0.6 and abs(row["error_p99_ttft_ms"]) < 1.0


def test_self_check_names_a_missing_rate(tmp_path):
    from llmbench.plan.validate import self_check

    shutil.copytree(EXAMPLE, tmp_path / "example")
    with pytest.raises(PlanError, match="rate-7.*not in"):
        self_check(tmp_path / "example", ["rate-0.5", "rate-1.5"], ["rate-7"])


def test_gpu_names_forgive_case_separators_and_suggest():
    for name in ("A100-80G", "a100-80gb", "A100 80GB"):
        assert catalog.gpu(name).name == "A100-80GB"
    assert catalog.gpu("H100-80GB").name == catalog.gpu("h100_sxm").name == "H100-SXM"
    with pytest.raises(KeyError, match="did you mean H100-SXM"):
        catalog.gpu("H10")


def test_moe_decode_reads_nearly_every_expert_beyond_a_few_tokens():
    """A step of B tokens touches 1 - (1 - k/E)^B of the routed experts, not k/E of them."""
    m = catalog.model("mixtral-8x7b")
    assert m.params_read(1) == pytest.approx(m.active_params, rel=1e-6)
    assert m.params_read(8) / m.params > 0.9 and m.params_read(256) == pytest.approx(m.params)
    dense = catalog.model("llama-3.1-8b")
    assert dense.params_read(1) == dense.params
    roof = RooflineModel(m, H100)
    assert roof.step_time(0, 64, 64 * 1000) > 2 * roof.step_time(0, 1, 1000)  # 64 decodes read ~3.6x the weights


def test_an_unsupported_architecture_names_what_it_lacks(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["OPTForCausalLM"], "num_hidden_layers": 48, "hidden_size": 7168,
                                  "num_attention_heads": 56, "ffn_dim": 28672, "vocab_size": 50272}))
    with pytest.raises(KeyError, match="OPTForCausalLM is not a layout the planner models.*no intermediate_size"):
        catalog.model(str(config))
