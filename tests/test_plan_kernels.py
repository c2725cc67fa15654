"""Terms measured on GPU kernels (AIConfigurator's kernel database, benchmarks/kernel_database.py): `expert kernels`,
`fp8 GEMMs`, `weight reads` and where attention computes; and the script that measures them."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.plan import gpus, models
from llmbench.plan.engines import KERNELS, Experts, Gemms, profile
from llmbench.plan.roofline import RooflineModel

H100 = gpus.gpu("H100-SXM")


def test_expert_kernels_cost_an_moe_step_its_measured_factor_and_fixed_time():
    """Tail term `expert kernels`: a step of an MoE model pays the engine's factor on its routed experts' roofline
    and a fixed time per MoE layer; a dense model's step is untouched."""
    m, vllm = models.model("qwen3-235b-a22b"), profile("vllm")
    plain = replace(vllm, kernels=replace(vllm.kernels, experts=Experts()))
    with_term, without = RooflineModel(m, H100, tp=8, engine=vllm), RooflineModel(m, H100, tp=8, engine=plain)
    fixed = KERNELS["vllm"].experts.layer_overhead * m.moe_layers
    assert m.moe_layers == 94 and fixed == pytest.approx(2.16e-3, rel=0.01)
    one = with_term.step_time(0, 1, 1000) - without.step_time(0, 1, 1000)
    assert fixed < one < fixed + 0.16 * without.step_time(0, 1, 1000)  # plus 16 % of the experts' read
    prefill = with_term.step_time(8192, 0, 0) / without.step_time(8192, 0, 0)
    assert 1.04 < prefill < 1.16  # routed experts are most of a prompt's FLOPs; the factor is 1.16
    dense = models.model("llama-3.1-8b")
    assert RooflineModel(dense, H100, engine=vllm).step_time(0, 8, 8000) == RooflineModel(
        dense, H100, engine=plain).step_time(0, 8, 8000)
    cpu = replace(H100, cuda_graphs=False)  # a `--gpu-spec` CPU: GPU kernels' costs are not its
    assert RooflineModel(m, cpu, tp=8, engine=vllm).step_time(0, 1, 1000) == RooflineModel(
        m, cpu, tp=8, engine=plain).step_time(0, 1, 1000)


def test_expert_kernels_on_an_a100_cost_the_a100s_measured_factor():
    """On Ampere the routed experts cost each engine's factor as timed on an A100 (vLLM 1.55, slower than its H100
    1.16), on every other GPU the H100's; a step without the A100 figure is a step at the plain roofline."""
    m, vllm = models.model("qwen3-235b-a22b"), profile("vllm")
    a100 = gpus.gpu("A100-80GB")
    plain = replace(vllm, kernels=replace(vllm.kernels, ampere_experts=Experts()))
    with_term, without = RooflineModel(m, a100, tp=8, engine=vllm), RooflineModel(m, a100, tp=8, engine=plain)
    assert with_term.routed_experts == KERNELS["vllm"].ampere_experts != KERNELS["vllm"].experts
    prefill = with_term.step_time(8192, 0, 0) / without.step_time(8192, 0, 0)
    assert 1.15 < prefill < 1.55  # above what the H100 factor (1.16) could add; the factor is 1.55
    assert RooflineModel(m, H100, tp=8, engine=vllm).step_time(8192, 0, 0) == RooflineModel(
        m, H100, tp=8, engine=plain).step_time(8192, 0, 0)
    assert RooflineModel(m, gpus.gpu("A100-40GB"), tp=8, engine=vllm).routed_experts.flops == 1.55


def test_kernel_database_carries_a_routing_ratio_to_an_engine_timed_under_skew_alone(benchmark_script, capsys):
    """An engine whose table timed only skewed routing gets its skewed factor x the balanced / skewed ratio of one
    that timed both on the same GPU, and its skewed fit's seconds a MoE layer."""
    script = benchmark_script("kernel_database")
    nan = math.nan
    script.transfer({"sglang": {"balanced": (1.32, 15e-3), script.SKEWED: (1.1, 23e-3)},
                     "vllm": {"balanced": (nan, nan), script.SKEWED: (1.3, 2.2e-3)}}, "balanced")
    out = capsys.readouterr().out
    assert "sglang 1.200" in out and "vllm: power_law_1.2 factor 1.300 x sglang's ratio 1.200 -> 1.56" in out
    assert "2.2 µs a MoE layer per step" in out


def test_sliding_window_layers_attend_to_their_window_only():
    """Tail term `sliding window`: a layer with a window reads and attends to its W latest tokens only, so past W
    a decode's attention grows with the context at the full layers' rate alone; a prompt's attention pairs in those
    layers are at most W a token; a model without such layers is as before."""
    oss = models.model("gpt-oss-120b")
    full = replace(oss, sliding_layers=0)
    alone = replace(oss, sliding_layers=oss.layers)
    a100 = gpus.gpu("A100-80GB")

    def step(m, *args):
        return RooflineModel(m, a100, engine=profile("vllm", a100)).step_time(*args)

    assert step(alone, 0, 64, 64 * 20000) == step(alone, 0, 64, 64 * 128)  # every layer windowed: 20,000 reads 128
    grow = {m.sliding_layers: step(m, 0, 64, 64 * 30000) - step(m, 0, 64, 64 * 10000) for m in (oss, full)}
    assert grow[18] == pytest.approx(grow[0] / 2, rel=0.02)
    assert step(alone, 8192, 0, 0) < step(oss, 8192, 0, 0) < step(full, 8192, 0, 0)
    assert step(oss, 100, 0, 0) == step(full, 100, 0, 0)  # a prompt shorter than the window: no pair outside it
    dense = models.model("llama-3.1-8b")
    assert dense.sliding_layers == 0 and models.model("mistral-7b").sliding_layers == 0


def test_expert_kernels_fit_recovers_a_known_line(benchmark_script):
    """benchmarks/kernel_database.py's fit: latency = a x roofline + c on relative error, exact on a line."""
    fit = benchmark_script("kernel_database").fit
    roof = np.array([0.01, 0.05, 0.2, 1.0, 4.0])
    a, c, err = fit(roof, 1.1 * roof + 0.0245)
    assert (a, c) == (pytest.approx(1.1), pytest.approx(0.0245)) and err < 1e-9


def test_fp8_gemms_fit_recovers_each_bound_apart(benchmark_script):
    """benchmarks/kernel_database.py's two-bound fit: latency = a_bytes x bytes time + a_flops x FLOPs time + c."""
    bounds_fit = benchmark_script("kernel_database").bounds_fit
    bytes_time, flops_time = np.array([1.0, 0.2, 3.0, 0.05, 2.0]), np.array([0.01, 2.0, 0.5, 4.0, 2.0])
    ab, af, c, err = bounds_fit(bytes_time, flops_time, 1.04 * bytes_time + 1.62 * flops_time + 0.0054)
    assert (ab, af, c) == (pytest.approx(1.04), pytest.approx(1.62), pytest.approx(0.0054)) and err < 1e-9


def test_kernel_database_names_a_folder_that_is_not_a_checkout(benchmark_script, tmp_path):
    result = CliRunner().invoke(benchmark_script("kernel_database").main, ["--aic", str(tmp_path)])
    assert result.exit_code != 0 and "no systems/data/h100_sxm folder (is it an aiconfigurator checkout?)" in result.output


def test_kernel_database_leaves_out_nemotrons_non_gated_experts(benchmark_script):
    """Nemotron-3's MoE FFNs have two matrices, not three: timed as gated they would read as 1.5x faster kernels
    (TensorRT-LLM's factor came out 1.02 with them, 1.12 without)."""
    import pandas as pd

    rows = pd.DataFrame({"kernel_source": ["moe_torch_flow_cutlass", "moe_torch_flow_nongated", "triton", "triton",
                                           "triton"],
                         "topk": [8, 6, 22, 6, 2], "hidden_size": [4096, 2688, 2048, 2688, 4096],
                         "inter_size": [1536, 1856, 5120, 1856, 14336], "num_experts": [128, 128, 512, 128, 8]})
    assert benchmark_script("kernel_database").non_gated(rows).tolist() == [False, True, True, True, False]


def test_fp8_gemms_cost_vllm_and_sglang_their_measured_flops_factor_on_hopper():
    """Tail term `fp8 GEMMs`: an FP8 checkpoint's dense GEMMs on Hopper cost vLLM's (SGLang's) measured factor on their
    FLOPs (a prompt's bound); TensorRT-LLM (its FP8 speed is its tuned prior), a bf16 checkpoint, an A100 (no FP8
    tensor cores) and a `--gpu-spec` CPU are untouched, and an MoE model's routed experts keep their own term."""
    m, vllm = models.model("llama-3.1-8b"), profile("vllm")
    plain = replace(vllm, kernels=replace(vllm.kernels, fp8=replace(vllm.kernels.fp8, flops=1.0)))
    term, none = (RooflineModel(m, H100, weight_dtype="fp8", engine=e) for e in (vllm, plain))
    assert term.fp8_gemms and KERNELS["vllm"].fp8.flops == 1.62
    assert 1.4 < term.step_time(8192, 0, 0) / none.step_time(8192, 0, 0) < 1.62  # GEMM FLOPs: most of a prompt
    assert 1.0 < term.step_time(0, 1, 1000) / none.step_time(0, 1, 1000) < 1.01  # a decode reads, it hardly computes
    assert profile("sglang").kernels.fp8.flops == 1.48 and profile("trtllm").kernels.fp8.flops == 1.0
    for g, dtype in ((H100, "bf16"), (gpus.gpu("A100-80GB"), "fp8"), (replace(H100, cuda_graphs=False), "fp8")):
        assert RooflineModel(m, g, weight_dtype=dtype, engine=vllm).step_time(8192, 0, 0) == RooflineModel(
            m, g, weight_dtype=dtype, engine=plain).step_time(8192, 0, 0), (g.name, dtype)
    moe = models.model("qwen3-235b-a22b")
    with_moe, without_moe = (RooflineModel(moe, H100, 8, "fp8", engine=e) for e in (vllm, plain))
    assert 1.05 < with_moe.step_time(8192, 0, 0) / without_moe.step_time(8192, 0, 0) < 1.35  # routed experts excluded


def test_weight_reads_stream_dense_weights_at_the_measured_share_on_hopper():
    """Tail term `weight reads`: on Hopper, vLLM's (SGLang's) dense GEMMs read their weights at the share of the HBM
    bandwidth its kernels were measured at, for the checkpoint's dtype, not at the family's MBU, and cost a fixed
    time a GEMM; TensorRT-LLM (its tuned prior), an A100, a `--gpu-spec` CPU and int4 weights keep the prior, and an
    MoE model's routed experts keep theirs."""
    m, vllm = models.model("llama-3.1-8b"), profile("vllm")
    plain = replace(vllm, kernels=replace(vllm.kernels, bf16=Gemms(), fp8=replace(vllm.kernels.fp8, read=0.0)))
    prior = 0.60 * H100.bandwidth
    for dtype, share, fixed in (("bf16", 0.878, 3.7e-6), ("fp8", 0.860, 9.7e-6)):
        term, none = (RooflineModel(m, H100, weight_dtype=dtype, engine=e) for e in (vllm, plain))
        assert term.weight_reads == (share, fixed) and none.weight_reads is None
        w = term.weight_bytes
        expected = w / (share * H100.bandwidth) - w / prior + m.dense_gemms * fixed
        assert term.step_time(0, 1, 1000) - none.step_time(0, 1, 1000) == pytest.approx(expected, rel=1e-9)
    bf16 = (RooflineModel(m, H100, engine=e).step_time(0, 1, 1000) for e in (vllm, plain))
    assert next(bf16) < 0.8 * next(bf16)  # a decode is its weight reads; an FP8 one of 8B pays them back in 128 GEMMs
    assert profile("sglang").kernels.bf16.read == 0.854 and profile("lmdeploy").kernels.bf16.read == 0.0
    for g, dtype, e in ((H100, "bf16", profile("trtllm")), (gpus.gpu("A100-80GB"), "bf16", vllm),
                        (replace(H100, cuda_graphs=False), "bf16", vllm), (H100, "int4", vllm)):
        assert RooflineModel(m, g, weight_dtype=dtype, engine=e).weight_reads is None, (g.name, dtype, e.name)
    moe = models.model("qwen3-235b-a22b")
    term, none = (RooflineModel(moe, H100, 8, engine=e) for e in (vllm, plain))
    dense = term.weight_bytes * moe.unrouted_params / moe.params
    expected = dense / (0.878 * 8 * H100.bandwidth) - dense / (8 * prior) + moe.dense_gemms * 3.7e-6
    assert term.step_time(0, 1, 1000) - none.step_time(0, 1, 1000) == pytest.approx(expected, rel=1e-9)


def test_weight_reads_fit_recovers_a_known_bandwidth(benchmark_script):
    """benchmarks/kernel_database.py's `weight reads`: decode-shaped GEMMs (m <= 16) over 64 MB of weights, latency =
    bytes / (f x bandwidth) + c; the wider and the smaller GEMMs are left out."""
    import pandas as pd

    n = np.array([8192, 16384, 28672, 57344, 2048, 8192])
    gemms = pd.DataFrame({"m": [1, 8, 16, 4, 1, 64], "n": n, "k": [8192] * 6,
                          "gemm_dtype": ["bfloat16"] * 6})
    gemms["latency"] = (gemms.n * gemms.k * 2 / (0.85 * 3.35e12) + 4e-6) * 1e3  # ms, as the database keeps it
    gemms.loc[4:, "latency"] *= 3  # a 64 MB-or-less GEMM and a 64-row one: not decode reads of streamed weights
    f, c, err = benchmark_script("kernel_database").weight_reads(gemms, 3.35e12)
    assert (f, c) == (pytest.approx(0.85), pytest.approx(4e-6)) and err < 1e-9


def test_attention_computes_at_the_kv_caches_peak():
    """An FP8 checkpoint with a bf16 KV cache attends at the bf16 peak; with an FP8 cache at the FP8 peak."""
    m = models.model("llama-3.1-8b")
    assert RooflineModel(m, H100, 2, "fp8", "bf16").attention_peak == 2 * H100.bf16_flops
    assert RooflineModel(m, H100, 2, "fp8", "fp8").attention_peak == 2 * H100.fp8_flops
    fixed, as_before = RooflineModel(m, H100, 1, "fp8", "bf16"), RooflineModel(m, H100, 1, "fp8", "bf16")
    as_before.__dict__["attention_peak"] = as_before.peak_flops  # attention charged at the FP8 peak
    pairs = 32768**2 / 2  # a 32,768-token prompt's causal pairs: its attention FLOPs at half the rate
    extra = 4 * m.layers * m.heads * m.head_dim * pairs / (fixed.efficiency.mfu * H100.bf16_flops) / 2
    assert fixed.step_time(32768, 0, 0) - as_before.step_time(32768, 0, 0) == pytest.approx(extra, rel=0.01)


def test_block_fp8_checkpoints_are_told_apart_by_name_and_by_config(tmp_path):
    """Tail term `block FP8` needs to know a checkpoint scales its FP8 weights per 128 x 128 block: DeepSeek's and
    Qwen's own -FP8 do, NVIDIA's and RedHat's -FP8 (per tensor, per channel) do not; a config.json says it with
    `weight_block_size` or compressed-tensors' `block` strategy."""
    named = {"Qwen/Qwen3-32B-FP8": True, "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": True,
             "deepseek-ai/DeepSeek-R1-0528": True, "RedHatAI/Qwen3-32B-FP8-dynamic": False,
             "nvidia/Llama-3.1-8B-Instruct-FP8": False, "Qwen/Qwen3-32B": False, "qwen3-32b-fp8": False}
    assert {name: models.model(name).fp8_blocks for name in named} == named
    base = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 3072,
            "vocab_size": 1000}
    group = {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}
    channel = {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}
    cases = (({"quant_method": "fp8", "weight_block_size": [128, 128]}, True), ({"quant_method": "fp8"}, False),
             ({"quant_method": "compressed-tensors", "config_groups": group}, True),
             ({"quant_method": "compressed-tensors", "config_groups": channel}, False), (None, False))
    for i, (quant, blocks) in enumerate(cases):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(base | ({"quantization_config": quant} if quant else {})))
        assert models.model(str(folder)).fp8_blocks is blocks, quant


def test_block_fp8_costs_its_own_measured_kernels_on_hopper():
    """Tail term `block FP8`: a block-scaled FP8 checkpoint on Hopper costs the kernels measured for it, not the
    per-tensor ones: vLLM's dense GEMMs compute at x1.40 (not x1.62) and pay 36.6 µs a GEMM to read (its activations
    are quantized per token group first), and its routed experts compute at x2.18 their roofline (not x1.16); an
    A100 (no FP8 tensor cores) and a per-tensor checkpoint keep today's terms."""
    vllm = profile("vllm")
    dense = models.model("Qwen/Qwen3-32B-FP8")
    block, tensor = (RooflineModel(m, H100, weight_dtype="fp8", engine=vllm)
                     for m in (dense, replace(dense, fp8_blocks=False)))
    assert block.block_fp8 and not tensor.block_fp8
    assert block.weight_reads == (1.071, 36.6e-6) and tensor.weight_reads == (0.860, 9.7e-6)
    assert block.step_time(8192, 0, 0) < 0.95 * tensor.step_time(8192, 0, 0)  # FLOPs x1.40 against x1.62
    decode = block.step_time(0, 8, 8000) - tensor.step_time(0, 8, 8000)
    assert decode > 0.5 * dense.dense_gemms * (36.6e-6 - 9.7e-6)  # the fixed cost a GEMM outweighs the faster read
    moe = models.model("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    block, tensor = (RooflineModel(m, H100, 4, "fp8", engine=vllm) for m in (moe, replace(moe, fp8_blocks=False)))
    assert block.step_time(8192, 0, 0) > 1.15 * tensor.step_time(8192, 0, 0)  # experts: FLOPs x2.18, not x1.16
    a100 = gpus.gpu("A100-80GB")
    assert RooflineModel(moe, a100, 4, "fp8", engine=vllm).step_time(8192, 0, 0) == RooflineModel(
        replace(moe, fp8_blocks=False), a100, 4, "fp8", engine=vllm).step_time(8192, 0, 0)
    assert not RooflineModel(moe, H100, 4, "bf16", engine=vllm).block_fp8  # bf16 weights: no FP8 kernels at all


def test_knee_fit_recovers_the_exponent_kernels_were_made_with(benchmark_script):
    """benchmarks/kernel_database.py's `knee`: each bound fitted apart (reads on decode shapes, FLOPs far past the
    ridge), then the GEMMs near their ridge put to the p-norm: the p they were made with reads ~0, the sum too
    slow, the max too fast."""
    import pandas as pd

    bench = benchmark_script("kernel_database")
    bw, peak, f, c, e, p = 3.35e12, 989e12, 0.85, 4e-6, 0.7, 3.0
    m = np.array([1, 4, 8, 16, 64, 128, 192, 256, 384, 512, 768, 1024, 4096, 8192, 16384])
    rows = pd.DataFrame([(mm, n, k) for n, k in ((8192, 8192), (28672, 8192), (8192, 28672)) for mm in m],
                        columns=["m", "n", "k"])
    rows["gemm_dtype"] = "bfloat16"
    read = (rows.n * rows.k + rows.m * rows.k + rows.m * rows.n) * 2 / bw / f
    flops = 2 * rows.m * rows.n * rows.k / peak / e
    rows["latency"] = (c + (read**p + flops**p) ** (1 / p)) * 1e3  # ms, as the database keeps it
    fr, cr, er, errors = bench.knee_errors(rows, bw, peak)
    assert abs(errors[3.0]) < 0.02 and errors[1.0] > 0.2 and errors[math.inf] < -0.03
    assert fr == pytest.approx(f, rel=0.02) and er == pytest.approx(e, rel=0.05)
