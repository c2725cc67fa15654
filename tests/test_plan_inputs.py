"""`llmbench plan` simulates the question it was asked: the request count given, the engine defaults of the
version and GPU, vLLM's activation memory, the catalog's cards and dtypes, and every flag the README lists."""

import json

import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.plan import engines, gpus, models
from llmbench.plan.memory import GiB, plan_memory, vllm_activation_peak


def plan(tmp_path, *args):
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", *args, "--no-search", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text()), r.output


def notes(tmp_path, *args) -> str:
    """A plan's printed text on a short workload (200 requests): its notes name the setup, whatever the load."""
    return plan(tmp_path, *args, "--num-prompts", "200")[1]


def test_the_simulated_request_count_is_the_one_asked(tmp_path):
    """A burst of 200 is simulated as 200 (its drain is most of it), and said; without --num-prompts, a
    steady state."""
    burst, text = plan(tmp_path, "--max-throughput", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len",
                       "512", "--output-len", "128", "--num-prompts", "200")
    assert burst["simulated"]["point"]["simulated_requests"] == 200
    assert "simulated: 200 requests (as --num-prompts asked)" in text
    figures = {f["name"]: f for f in burst["figures"]}  # a burst's latencies, with bands, means beside them
    assert {"mean TTFT", "P50 TTFT", "P99 TTFT", "mean TPOT", "P99 E2EL"} <= set(figures)
    assert all("band" in figures[name] for name in ("mean TTFT", "P99 TTFT"))
    steady, text = plan(tmp_path, "--max-throughput", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len",
                        "512", "--output-len", "128")
    assert steady["simulated"]["point"]["simulated_requests"] == 1000 and "steady state" in text
    assert burst["simulated"]["point"]["output_throughput"] < steady["simulated"]["point"]["output_throughput"]
    rated, _ = plan(tmp_path, "--at-rate", "50", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len", "512",
                    "--output-len", "128", "--num-prompts", "150")
    assert rated["simulated"]["point"]["simulated_requests"] == 150


def test_vllm_defaults_follow_the_version_and_the_gpu():
    h100, a100 = gpus.gpu("H100"), gpus.gpu("A100-80GB")
    assert (engines.profile("vllm", h100).max_num_seqs, engines.profile("vllm", h100).max_num_batched_tokens) == \
        (1024, 8192)
    assert (engines.profile("vllm", a100).max_num_seqs, engines.profile("vllm", gpus.gpu("L4")).max_num_batched_tokens) \
        == (256, 2048)
    old = engines.profile("vllm@0.6.3", h100, max_model_len=4096)
    assert (old.max_num_seqs, old.max_num_batched_tokens, old.chunked_prefill) == (256, 4096, False)
    assert "V0" in old.defaults and "V1" in engines.profile("vllm@0.11", h100).defaults
    with pytest.raises(KeyError, match="bad vLLM version"):
        engines.profile("vllm@new")
    sglang = engines.profile("sglang@0.4")
    assert sglang.max_num_seqs == engines.PROFILES["sglang"].max_num_seqs and "sglang 0.4" in sglang.defaults
    with pytest.raises(KeyError, match="unknown engine 'tgi'"):
        engines.profile("tgi@2.0")
    keeps = {name: engines.profile(name, h100).shape(10**6).keep_preempted  # tail term `cached preemption`
             for name in ("vllm", "vllm@0.11", "vllm@0.6.3", "sglang", "trtllm")}
    assert keeps == {"vllm": True, "vllm@0.11": True, "vllm@0.6.3": False, "sglang": False, "trtllm": False}
    assert not engines.profile("vllm", h100).with_knobs(prefix_caching=False).shape(10**6).keep_preempted


def test_a_vllm_before_0_6_pays_its_host_work_per_sequence(tmp_path):
    """Tail term `host per sequence`: before 0.6.0 the scheduler and output processing ran in step with the GPU, so
    a V0 step of 256 decodes lasts 256 x (64 - 4) µs longer on 0.5 than on 0.6; the plan says so."""
    from llmbench.plan.roofline import RooflineModel

    h100, model = gpus.gpu("H100"), models.model("llama-3.1-8b")
    old, new = engines.profile("vllm@0.5.3", h100), engines.profile("vllm@0.6.3", h100)
    assert old.seq_overhead == engines.PRE_ASYNC_SEQ_OVERHEAD and new.seq_overhead == engines.V0_COSTS["seq_overhead"]
    assert "host per sequence 64 µs" in old.defaults and "host per sequence" not in new.defaults
    steps = [RooflineModel(model, h100, engine=e).step_time(0, 256, 256 * 1000) for e in (old, new)]
    assert steps[0] - steps[1] == pytest.approx(256 * (old.seq_overhead - new.seq_overhead), rel=1e-6)
    args = ("--at-rate", "5", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len", "512", "--output-len", "128",
            "--num-prompts", "200")
    slow, text = plan(tmp_path, *args, "--engine", "vllm@0.5.3")
    fast, _ = plan(tmp_path, *args, "--engine", "vllm@0.6.3")
    assert "host per sequence 64 µs a step" in text
    tpot = [p["simulated"]["point"]["mean_tpot_ms"] for p in (slow, fast)]
    assert tpot[0] > tpot[1]


def test_vllm_activation_memory_is_the_samplers_not_every_token():
    """The published peaks (llm-d config_explorer, H100, vLLM V1 defaults of 1024 sequences) within 3%, and
    an 8B model on a 24 GB card keeps a usable KV pool (fp32 logits for all 8192 tokens left 0.4 GiB)."""
    for name, vocab, published in (("llama-3.1-8b", None, 4.76), ("qwen3-0.6b", 151936, 5.56),
                                   ("gpt-oss-20b", 201088, 7.38)):
        spec = models.model(name) if vocab is None else models.ModelSpec(name, 1, 1024, 8, 8, 128, 1, vocab)
        assert vllm_activation_peak(spec, 1024, 8192) / GiB == pytest.approx(published, rel=0.03), name
    a10g = plan_memory(models.model("llama-3.1-8b"), gpus.gpu("A10G"), 1, "bf16", "bf16",
                       engines.profile("vllm", gpus.gpu("A10G")))
    assert a10g.activation_per_gpu / GiB < 1.5 and a10g.kv_tokens > 20_000


def test_catalog_entries_and_dtypes():
    nvl = gpus.gpu("H100-NVL")
    assert nvl.name == "H100-NVL" and nvl.memory / 1e9 == pytest.approx(94) and nvl.bandwidth / 1e12 == \
        pytest.approx(3.938)
    assert gpus.gpu("h100 nvl").name == "H100-NVL" and gpus.gpu("H100-PCIe").memory / GiB == pytest.approx(80)


def test_flags_the_readme_lists_run(tmp_path):
    """--max-model-len (any value, any question) and the rest of the engine flags reach the plan."""
    out, text = plan(tmp_path, "--at-rate", "2", "--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--max-model-len",
                     "4096", "--max-num-seqs", "64", "--num-scheduler-steps", "4", "--engine", "vllm@0.6",
                     "--input-len", "256", "--output-len", "64", "--num-prompts", "100")
    assert out["memory"]["max_model_len"] == 4096
    assert any("vLLM 0.6 (V0)" in e and "--max-num-seqs" in e for e in out["estimates"])
    _, text = plan(tmp_path, "--at-rate", "2", "--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--weight-dtype",
                   "mxfp4", "--input-len", "256", "--output-len", "64", "--num-prompts", "100")
    assert "lengths counted" not in text  # fixed lengths: no tokenizer counted them


def test_the_tokenizer_that_counted_is_named():
    """Lengths the bundled tokenizer counted, planned for a catalog model: the plan says whose tokens they are."""
    import numpy as np

    from llmbench.plan.planner import PlanRequest, make_plan
    from llmbench.plan.workload import Workload
    from llmbench.slo import SLO

    work = Workload(np.full(50, 300), np.full(50, 120), "sharegpt sample (50 requests, bundled tokenizer)")
    plan = make_plan(PlanRequest(SLO(), work, at_rate=1.0, model="llama-3.1-8b", gpu="H100", search_knobs=False,
                                 num_requests=50))
    assert any("counted with the bundled tokenizer, not llama-3.1-8b's" in e for e in plan["estimates"])
    assert plan["setup"]["workload"].endswith("bundled tokenizer)")


def test_a_steady_state_loop_says_its_opening_burst_is_left_out(tmp_path):
    """Without --num-prompts a closed loop's figures are its steady state: the first `concurrency` requests, sent
    at once, are simulated and left out, and the plan says so (a benchmark's run of a few hundred includes them:
    vLLM-CPU at 96 in flight read P99 TTFT 9.1 s over its run, 1.7 s past the burst)."""
    from click.testing import CliRunner

    from llmbench.cli import main

    out = tmp_path / "c8.json"
    r = CliRunner().invoke(main, ["plan", "--concurrency", "8", "--model", "qwen2.5-0.5b", "--gpu", "H100",
                                  "--no-search", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "past the closed loop's opening burst of 8, left out of the figures" in r.output
    assert json.loads(out.read_text())["simulated"]["point"]["opening_left_out"] == 8


def test_max_concurrency_under_a_bound_and_wide_bands_said_plainly(tmp_path):
    """`--max-concurrency-under e2el=...` (ShareGPT lengths: P99 outputs near 1,000 tokens): a tighter bound never allows more requests in flight; a band wider
    than ±50 % (MoE over TP 2) is printed as an order of magnitude, not as a range."""
    from click.testing import CliRunner

    from llmbench.cli import main

    found = {}
    for bound in ("20s", "60s"):
        out = tmp_path / f"c{bound}.json"
        r = CliRunner().invoke(main, ["plan", "--max-concurrency-under", f"e2el={bound}", "--model", "llama-3.1-8b",
                                      "--gpu", "H100", "--no-search", "--num-prompts", "200", "--out", str(out)])
        assert r.exit_code == 0, r.output
        plan = json.loads(out.read_text())
        found[bound] = plan["simulated"]["max_concurrency"]
        assert plan["question"] == "max-concurrency" and f"P99 E2EL <= {bound[:-1]} s" in plan["answer"]
        assert "opening burst" not in plan["answer"]  # a run of 200 as asked: its opening burst is in it
    assert 1 <= found["20s"] <= found["60s"]
    both = CliRunner().invoke(main, ["plan", "--qps", "5", "--max-concurrency-under", "e2el=10s"])
    assert both.exit_code == 2 and "one question at a time" in both.output
    wide = CliRunner().invoke(main, ["plan", "--at-rate", "1", "--model", "mixtral-8x7b", "--gpu", "H100", "--tp", "2",
                                     "--num-prompts", "100", "--out", str(tmp_path / "w.json")])
    assert wide.exit_code == 0 and "order of magnitude only — measure it" in wide.output


def test_more_api_servers_drain_a_thousand_streams_faster(tmp_path):
    """`token drain`: a thousand streams at once outrun one API server's per-token work on an H100, so vLLM's
    --api-server-count (front-end processes sharing the streams) raises the burst's throughput, and the plan
    says the per-token figure it used."""
    args = ("--max-throughput", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len", "128", "--output-len",
            "256", "--num-prompts", "1000")
    one, text = plan(tmp_path, *args)
    four, text4 = plan(tmp_path, *args, "--api-server-count", "4")
    assert four["simulated"]["point"]["output_throughput"] > 1.2 * one["simulated"]["point"]["output_throughput"]
    assert "n x 87 µs" in " ".join(text.split()) and "n x 22 µs" in " ".join(text4.split())
    assert "--api-server-count" in " ".join(e for e in four["estimates"] if "engine defaults" in e)


def test_long_prefill_token_threshold_reaches_the_plan(tmp_path):
    """vLLM's --long-prefill-token-threshold: a 6,000-token prompt computed 256 tokens a step no longer stalls the
    decodes beside it for a whole prompt's step (P99 ITL 99 -> 30 ms here), and takes more steps to its first token
    (median TTFT 226 -> 430 ms); the plan says the flag as given; an engine without the flag is told so."""
    args = ("--at-rate", "1", "--model", "llama-3.1-8b", "--gpu", "H100", "--input-len", "6000", "--output-len",
            "200", "--num-prompts", "200")
    base, _ = plan(tmp_path, *args)
    capped, _ = plan(tmp_path, *args, "--long-prefill-token-threshold", "256")
    assert capped["setup"]["knobs"] == {"long_prefill_token_threshold": 256}
    assert any("--long-prefill-token-threshold as given" in e for e in capped["estimates"])
    point, base_point = capped["simulated"]["point"], base["simulated"]["point"]
    assert point["p99_itl_ms"] < 0.5 * base_point["p99_itl_ms"]
    assert point["median_ttft_ms"] > 1.5 * base_point["median_ttft_ms"]
    r = CliRunner().invoke(main, ["plan", *args, "--engine", "sglang", "--long-prefill-token-threshold", "256"])
    assert r.exit_code == 2 and "--long-prefill-token-threshold is a vLLM flag" in r.output


def test_chunked_prefill_flag_per_engine(tmp_path):
    """`--[no-]chunked-prefill` means what the engine does without it: TensorRT-LLM (off by default, as the
    library ships) puts whole prompts beside the decodes; SGLang and vLLM 0.6 run prefill-only steps."""
    trt = engines.profile("trtllm").shape(10**6)
    assert trt.chunked_prefill and trt.whole_prompts
    on = engines.profile("trtllm").with_knobs(chunked_prefill=True).shape(10**6)
    assert on.chunked_prefill and not on.whole_prompts
    sglang = engines.profile("sglang").shape(10**6)
    assert not sglang.chunked_prefill and not sglang.whole_prompts
    got, _ = plan(tmp_path, "--qps", "2", "--engine", "trtllm", "--chunked-prefill", "--model", "llama-3.1-8b",
                  "--gpu", "H100-SXM")
    assert got["setup"]["knobs"] == {"chunked_prefill": True}


def test_graph_padding_follows_each_engines_capture_list(tmp_path):
    """`graph padding`: vLLM V1 runs any step of up to its largest captured size as the next captured size
    (1, 2, 4, every 8 below 256, every 16 up to min(2 x max_num_seqs, 512)); V0, SGLang and the bundled engine pad
    decode-only steps; TensorRT-LLM and a --gpu-spec device (a CPU) pad nothing. Padding rows cost GEMM FLOPs."""
    from llmbench.plan import cuda_graphs
    from llmbench.plan.roofline import RooflineModel

    v1 = cuda_graphs.capture_sizes("vllm", 1024, 8192, "hopper")
    assert v1 == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert cuda_graphs.capture_sizes("vllm", 4, 8192, "hopper") == (1, 2, 4, 8)
    assert cuda_graphs.capture_sizes("vllm", 1024, 8192, "blackwell")[-1] == 1024
    assert cuda_graphs.capture_sizes("vllm", 1024, 300, "hopper")[-2:] == (288, 300)  # the token budget itself
    assert cuda_graphs.capture_sizes("sglang", 1024, 8192, "hopper")[-1] == 160
    assert cuda_graphs.padded(9, v1) == 16 and cuda_graphs.padded(257, v1) == 272 and cuda_graphs.padded(513, v1) == 513

    from dataclasses import replace

    model, h100 = models.model("llama-3.1-8b"), gpus.gpu("H100-SXM")
    vllm = engines.profile("vllm", h100)
    unpadded, decode_only = replace(vllm, graphs=""), replace(vllm, graphs="vllm-v0")

    def step(engine, gpu=h100, prefill=0.0, seqs=9.0):
        return RooflineModel(model, gpu, engine=engine).step_time(prefill, seqs, 1000.0 * seqs)

    roof = RooflineModel(model, h100, engine=vllm)
    seven_rows = (roof.gemm_flops(16, 9) - roof.gemm_flops(9, 9)) / (roof.efficiency.mfu * roof.peak_flops)
    assert step(vllm) - step(unpadded) == pytest.approx(seven_rows, rel=1e-6) and seven_rows > 0
    assert step(vllm, seqs=16.0) == step(unpadded, seqs=16.0) and step(vllm, seqs=600.0) == step(unpadded, seqs=600.0)
    assert step(decode_only) == step(vllm)  # a decode step pads under both
    assert step(decode_only, prefill=9.0, seqs=0.0) == step(unpadded, prefill=9.0, seqs=0.0) < step(
        vllm, prefill=9.0, seqs=0.0)  # a step with a prompt pads under V1 only
    assert engines.profile("trtllm").graphs == "" and RooflineModel(model, h100, engine=engines.profile(
        "trtllm")).graph_sizes == ()
    cpu = gpus.gpu_from_spec(_spec(tmp_path, {}))
    assert step(vllm, gpu=cpu) == step(unpadded, gpu=cpu)
    assert RooflineModel(model, h100, engine=engines.profile("vllm@0.6.3", h100)).graph_sizes[-1] == 256
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM")
    assert "graph padding (steps of up to 512 tokens run as the next of" in " ".join(text.split())


def _spec(tmp_path, extra: dict):
    path = tmp_path / "device.json"
    path.write_text(json.dumps({"name": "cpu", "memory_gb": 24, "bandwidth_gb_s": 38.8, "bf16_tflops": 0.2} | extra))
    return path


def test_a_described_device_replays_graphs_only_when_its_file_says_so(tmp_path):
    assert not gpus.gpu_from_spec(_spec(tmp_path, {})).cuda_graphs
    assert gpus.gpu_from_spec(_spec(tmp_path, {"cuda_graphs": True})).cuda_graphs
    with pytest.raises(KeyError, match="cuda_graphs must be true or false"):
        gpus.gpu_from_spec(_spec(tmp_path, {"cuda_graphs": "yes"}))


def test_a_plan_says_when_the_api_server_sets_the_pace(tmp_path):
    """A small model's burst streams faster than one API server drains tokens (87 µs each): the plan says its
    latencies are outside the planner's physics; a 70B model's burst on four GPUs streams far slower and does not."""
    args = ("--max-throughput", "--gpu", "H100", "--engine", "vllm", "--input-len", "512", "--output-len", "128",
            "--num-prompts", "500")
    small, text = plan(tmp_path, *args, "--model", "qwen2.5-0.5b")
    assert "the API server streams tokens" in text and any("API server" in e for e in small["estimates"])
    big, text = plan(tmp_path, *args, "--model", "llama-3.1-70b", "--gpus-per-replica", "4")
    assert "the API server streams tokens" not in text
    assert big["simulated"]["point"]["output_throughput"] * 87e-6 < 0.8


def test_an_moe_plan_names_its_expert_kernels_and_a_dense_one_does_not(tmp_path):
    text = notes(tmp_path, "--qps", "2", "--model", "qwen3-30b-a3b", "--gpu", "H100-SXM")
    flat = " ".join(text.split())
    assert "expert kernels (the routed experts' GEMMs x1.16 their roofline and 23.0 µs a MoE layer, 48 layers" in flat
    assert "in AIConfigurator's H100 kernel database" in flat
    text = notes(tmp_path, "--qps", "2", "--model", "qwen3-30b-a3b", "--gpu", "A100-80GB")
    flat = " ".join(text.split())
    assert "expert kernels (the routed experts' GEMMs x1.55 their roofline and 2.2 µs a MoE layer, 48 layers" in flat
    assert "in AIConfigurator's A100 kernel database" in flat
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM")
    assert "expert kernels" not in " ".join(text.split())


def test_a_vllm_plan_names_cached_preemption_and_an_sglang_one_does_not(tmp_path):
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--engine", "vllm")
    assert "cached preemption (a preempted request's blocks stay in vLLM V1's prefix cache" in " ".join(text.split())
    assert "whole-prompt admission (vLLM 0.19 on" in " ".join(text.split())
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--engine", "vllm@0.18")
    assert "cached preemption" in " ".join(text.split()) and "whole-prompt admission" not in " ".join(text.split())
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--engine", "sglang")
    assert "cached preemption" not in " ".join(text.split())


def test_a_gpt_oss_plan_names_its_sliding_window_and_a_llama_one_does_not(tmp_path):
    text = notes(tmp_path, "--qps", "2", "--model", "gpt-oss-20b", "--gpu", "H100-SXM")
    assert "sliding window (12 of 24 layers attend to their 128 latest tokens only" in " ".join(text.split())
    assert "hybrid KV groups (1 full-attention and 1 sliding-window groups share one pool" in " ".join(text.split())
    assert "only to its prompt end (sparse window cache, vLLM 0.23 on)" in " ".join(text.split())
    text = notes(tmp_path, "--qps", "2", "--model", "gpt-oss-20b", "--gpu", "H100-SXM", "--engine", "sglang")
    assert "sliding window" in text and "hybrid KV groups" not in " ".join(text.split())
    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM")
    assert "sliding window" not in " ".join(text.split())


def test_an_fp8_plan_names_its_gemms_and_where_attention_computes(tmp_path):
    """An FP8 checkpoint on Hopper: the plan names the measured FP8 FLOPs factor and weight reads (vLLM's),
    TensorRT-LLM's absence of them, and the bf16 peak its attention runs at with a bf16 KV cache; a bf16 plan names
    its bf16 weight reads and no FP8 term; an A100 plan neither."""
    args = ("--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--weight-dtype", "fp8")
    flat = " ".join(notes(tmp_path, *args).split())
    assert "fp8 GEMMs (FLOPs x1.62 their roofline" in flat and "attention at the bf16 peak" in flat
    assert "weight reads (fp8 weights of the dense GEMMs at 86% of the bandwidth and 9.7 µs a GEMM, 128 a step" in flat
    flat = " ".join(notes(tmp_path, *args, "--engine", "trtllm", "--kv-dtype", "fp8").split())
    assert "fp8 GEMMs not charged (trtllm's FP8 speed is its tuned prior)" in flat and "at the FP8 peak" in flat
    assert "weight reads at the MBU prior (trtllm's fp8 GEMMs" in flat
    flat = " ".join(notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM").split())
    assert "fp8 GEMMs" not in flat and "weight reads (bf16 weights of the dense GEMMs at 88% of the bandwidth" in flat
    flat = " ".join(notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "A100-80GB").split())
    assert "weight reads" not in flat


def test_a_block_fp8_plan_names_the_kernels_measured_for_blocks(tmp_path):
    """Qwen's own -FP8 checkpoint scales per 128 x 128 block: the plan names the block kernels' figures (experts,
    dense GEMMs, reads and their fixed cost), not the per-tensor ones."""
    flat = " ".join(notes(tmp_path, "--qps", "2", "--model", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "H100-SXM").split())
    assert "the routed block-FP8 experts' reads x1.06 and FLOPs x2.18 their roofline and 31.5 µs a MoE layer" in flat
    assert "block FP8 GEMMs (FLOPs x1.40 their roofline" in flat and "fp8 GEMMs (FLOPs x1.62" not in flat
    assert "weight reads (fp8 (128 x 128 blocks) weights of the dense GEMMs at 107% of the bandwidth (over 100 %" in flat


def test_a_plan_names_the_front_ends_ingest(tmp_path):
    """Tail term `front-end ingest` is in every plan's notes, with the measured figures."""
    from llmbench.plan.ingest import INGEST_COST, INGEST_PARSE_SHARE

    text = notes(tmp_path, "--qps", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM")
    flat = " ".join(text.split())
    assert (f"front-end ingest (the API server parses every request of a burst before it renders any for the engine: "
            f"{INGEST_COST * 1e3:.2f} ms a request, {INGEST_PARSE_SHARE:.0%} of it parsing)") in flat


def test_a_setup_vllm_would_not_start_names_the_flag_it_needs(tmp_path):
    """vLLM refuses to start unless its KV pool holds one request of --max-model-len, by default the model's
    context: Qwen3-32B on one H100 holds ~18k tokens against 40,960. The plan warns, names the longest length vLLM
    starts with (whole blocks of the pool), and says none when the length asked for fits; one that does not fit
    the GPUs asked for is refused."""
    args = ["--at-rate", "1", "--model", "qwen3-32b", "--gpu", "H100", "--engine", "vllm@0.11", "--input-len", "512",
            "--output-len", "128", "--num-prompts", "50"]
    out, text = plan(tmp_path, *args)
    held, longest = out["memory"]["kv_capacity_tokens"], out["memory"]["longest_max_model_len"]
    assert held - 16 < longest <= held and longest % 16 == 0 and out["memory"]["max_model_len"] == 640
    assert len(out["warnings"]) == 1 and "40,960" in out["warnings"][0] and f"at most {longest:,}" in \
        out["warnings"][0]
    assert "warning: vLLM will not start with its default --max-model-len" in text
    given, text = plan(tmp_path, *args, "--max-model-len", "16384")
    assert given["warnings"] == [] and "warning:" not in text
    common, _ = plan(tmp_path, *args[:2], "--model", "llama-3.1-8b", *args[4:])
    assert common["warnings"] == [] and common["memory"]["longest_max_model_len"] >= 131072
    r = CliRunner().invoke(main, ["plan", *args, "--max-model-len", "32768", "--gpus-per-replica", "1", "--no-search",
                                  "--out", str(tmp_path / "no.json")])
    assert r.exit_code != 0 and "needs 32768" in r.output


def test_vllm_asks_a_sliding_window_layer_for_its_window_and_a_step_only():
    """vLLM's start-up check under its hybrid KV manager (0.10+; `SlidingWindowSpec.max_memory_usage_bytes`): a
    full-attention layer needs the whole length, a sliding one its window - 1 and a step's tokens, plus a block;
    before 0.10 every layer needed the whole length. The same rule decided which pools vLLM-CPU 0.32 started with
    (benchmarks/start_check.py), its null block set aside as 0.29 on do."""
    from llmbench.plan.memory import vllm_kv_needed, vllm_longest_len

    h100, oss, dense = gpus.gpu("H100"), models.model("gpt-oss-20b"), models.model("llama-3.1-8b")
    new, old = engines.profile("vllm@0.11", h100), engines.profile("vllm@0.9", h100)
    assert (oss.layers, oss.sliding_layers, oss.sliding_window, new.block_size, new.max_num_batched_tokens) == \
        (24, 12, 128, 16, 8192)
    assert vllm_kv_needed(oss, 131072, new) == (12 * 131072 + 12 * (520 + 1) * 16) / 24
    assert vllm_kv_needed(oss, 131072, old) == vllm_kv_needed(dense, 131072, new) == 131072
    assert vllm_kv_needed(oss, 100, new) == (12 * 112 + 12 * 128) / 24  # a short length caps the window's share
    assert vllm_kv_needed(dense, 1000, new) == 1008  # whole blocks
    assert vllm_longest_len(dense, 1000, new, 131072) == 992 and vllm_longest_len(dense, 10, new, 131072) == 0
    latest = engines.profile("vllm@0.32", h100)  # from 0.29 the check sets the pool's null block aside
    assert vllm_kv_needed(dense, 1000, latest) == 1008 + 16 and vllm_longest_len(dense, 1000, latest, 131072) == 976
    assert vllm_kv_needed(oss, 131072, latest) == (12 * 131072 + 12 * (520 + 1) * 16) / 24 + 8  # a block of one group
    pool = vllm_kv_needed(oss, 50000, new)
    assert vllm_longest_len(oss, pool, new, 131072) == 50000 and vllm_longest_len(oss, pool, old, 131072) < 50000


def test_a_multi_turn_sweep_is_planned_in_requests_with_its_measured_prefix_share(scripted, tmp_path, tiny_model):
    """On vLLM-CPU, `plan --results` of a multi-turn sweep (1 conversation/s of 2.83 turns each) read its
    1 conversation/s as 1 req/s per replica (four replicas for 2 QPS where two do), and replayed its requests as if
    none found its history in the prefix cache, where the server's own counters found 41 % of its prompt tokens
    there. A ShareGPT sweep's reuse is an accident (an earlier command's prompts), never planned with."""
    server = scripted("--ttft-ms", "20", "--itl-ms", "5")
    out = tmp_path / "mt"
    r = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset",
                                  "multi-turn", "--max-turns", "2", "--backend", "openai-chat", "--num-prompts", "8",
                                  "--rate", "2,4", "--output-len", "8", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output

    def counted(share: float, dataset: str | None = None) -> None:  # what vLLM's prefix-cache counters say
        for path in out.glob("rate-*.json"):
            result = json.loads(path.read_text())
            result["server_prefix_hit_rate"] = share
            result["dataset"] = dataset or result["dataset"]
            path.write_text(json.dumps(result))

    counted(0.4)
    got, text = plan(tmp_path, "--results", str(out), "--qps", "8", "--model", "qwen2.5-0.5b", "--gpu", "L4")
    turns = got["measured"]["conversations"]["turns"]
    assert turns == pytest.approx(2.0) and got["measured"]["per_replica_rate"] == pytest.approx(4 * turns)
    assert "8.00 req/s per replica (4 conversations/s of 2 turns each)" in got["answer"]
    assert "prefix cache: the server found 40% of the sweep's prompt tokens cached" in text
    counted(0.75, "sharegpt")
    text = plan(tmp_path, "--results", str(out), "--qps", "8", "--model", "qwen2.5-0.5b", "--gpu", "L4")[1]
    assert "found 75% of its prompt tokens already cached, a sharegpt draw" in text and "planned with none" in text
