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
    with pytest.raises(KeyError, match="for vLLM only"):
        engines.profile("sglang@0.4")


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
