"""`llmbench plan validate`: every published row of planning.md §9 put to the planner, predicted beside
published. Each case states its setup as the source does (model, GPUs, TP, dtypes, engine, workload)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llmbench.plan import bands, engines, gpus, mlperf, models, trtllm_bench
from llmbench.plan.case import Case
from llmbench.plan.memory import GiB, MemoryPlan, describe_misfit, plan_memory, vllm_kv_needed
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.search import SimSetup, at_concurrency, at_rate, max_throughput
from llmbench.plan.workload import Workload

KIND = {"output_throughput": "throughput", "request_throughput": "throughput", "capacity": "throughput",
        "kv_gib_per_gpu": "memory", "weights_gib_per_gpu": "memory"}


def kind(metric: str) -> str:
    """throughput (tok/s, req/s, P99-constrained capacity), p99 (tail latencies), latency (medians and means),
    memory."""
    return KIND.get(metric, "p99" if metric.startswith("p99_") else "latency")


# rows by source: §9 (A-E) and MLPerf v4.1 (M4) chose the priors, MLPerf v5.1 (M5, mlperf.py) the knee exponent
# with them, inference-sim's vLLM ground truth on H100 (I, inference_sim.py) vLLM V1's fixed costs; TensorRT-LLM's
# other rows (H, held_out.py), a vLLM 0.14 rate sweep (V, rate_sweep.py) and GPUStack's bursts (G, burst_runs.py)
# were read only after, never tuned on; the same lab's other pages (L, lab_pages.py) were read after all of it
HELD_OUT = ("H", "V", "G", "L")
SOURCES = {"A": "SGLang v0.3 / vLLM v0.6 blog", "B": "TensorRT-LLM perf overview (section 9 rows)",
           "C": "NIM 1.8 benchmarks", "D": "Databricks blog", "E": "llm-d memory results",
           "M4": "MLPerf Inference v4.1", "H": "TensorRT-LLM perf overview (other rows)",
           "M5": "MLPerf Inference v5.1",
           "I": "inference-sim's vLLM ground truth on H100 (sim-to-real-accuracy-validation)",
           "V": "vLLM 0.14 rate sweep on H200 (DO-Solutions gtc-2026-doks)",
           "G": "GPUStack performance lab, Qwen3-235B-A22B and Qwen3-14B on H100",
           "L": "GPUStack performance lab, its other pages (DeepSeek-R1, GLM-4.5-Air, gpt-oss, Qwen3 on A100, H100 "
                "and H200)"}
VLLM_060 = {"scheduler_steps": 10, "max_num_batched_tokens": 8192}  # the blog's --num-scheduler-steps 10
ROW_A = "A: Llama-3.1-8B, 1xA100-80GB, ShareGPT"
B = [(128, 128, 28312, 27911), (1000, 1000, 15220, 17744), (2048, 128, 3450, 3538), (5000, 500, 3459, 3902),
     (20000, 2000, 1351, 1804)]
CASES = [
    Case("A", f"{ROW_A}, SGLang 0.3, 4 req/s", "llama-3.1-8b", "A100-80GB", 1, "sglang", "rate", 4,
         {"median_e2el_ms": 1564, "median_ttft_ms": 31.98, "median_tpot_ms": 13.17}, requests=1200),
    Case("A", f"{ROW_A}, SGLang 0.3, 8 req/s", "llama-3.1-8b", "A100-80GB", 1, "sglang", "rate", 8,
         {"median_e2el_ms": 2175, "median_ttft_ms": 35.68, "median_tpot_ms": 17.85}, requests=2400),
    Case("A", f"{ROW_A}, SGLang 0.3, offline", "llama-3.1-8b", "A100-80GB", 1, "sglang", "max", 0,
         {"output_throughput": 4281.5}, requests=2500),
    Case("A", f"{ROW_A}, vLLM 0.6 multi-step 10, 4 req/s", "llama-3.1-8b", "A100-80GB", 1, "vllm@0.6", "rate", 4,
         {"median_e2el_ms": 1692, "median_ttft_ms": 100.48, "median_tpot_ms": 14.14}, requests=1200, knobs=VLLM_060),
    Case("A", f"{ROW_A}, vLLM 0.6 multi-step 10, 8 req/s", "llama-3.1-8b", "A100-80GB", 1, "vllm@0.6", "rate", 8,
         {"median_e2el_ms": 2137, "median_ttft_ms": 120.39, "median_tpot_ms": 17.09}, requests=2400, knobs=VLLM_060),
    Case("A", f"{ROW_A}, vLLM 0.6 multi-step 10, offline", "llama-3.1-8b", "A100-80GB", 1, "vllm@0.6", "max", 0,
         {"output_throughput": 4132.4}, requests=2500, knobs=VLLM_060),
    *[Case("B", f"B: Llama-3.1-8B FP8, 1x{gpu}, TensorRT-LLM, {isl}/{osl}, max throughput", "llama-3.1-8b", gpu, 1,
           "trtllm", "max", 0, {"output_throughput": pub}, "fp8", "fp8", isl, osl, trtllm_bench.REQUESTS[isl, osl],
           streamed=False, knobs=trtllm_bench.knobs("llama-3.1-8b", gpu, 1, isl, osl))
      for gpu, col in (("H100-SXM", 2), ("H200", 3)) for isl, osl, *pubs in B for pub in [(isl, osl, *pubs)[col]]],
    *[Case("C", f"C: Llama-3.3-70B FP8, 2xH100 TP2, NIM, 5000/500, concurrency {c}", "llama-3.3-70b", "H100-SXM", 2,
           "trtllm", "concurrency", c, {"median_ttft_ms": ttft, "median_tpot_ms": itl, "output_throughput": tok},
           "fp8", "fp8", 5000, 500, max(4 * c, 20))
      for c, ttft, itl, tok in ((1, 407, 18.6, 51.7), (25, 689, 38.8, 623), (50, 835, 59.7, 814),
                                (100, 7996, 92.9, 917))],
    *[Case("D", f"D: {name}, {tp}xA100-40GB, TTFT of a 512-token prompt", name, "A100-40GB", tp, "trtllm", "static", 1,
           {"median_ttft_ms": ttft}, isl=512, osl=1)
      for name, tp, ttft in (("mpt-7b", 1, 46), ("mpt-7b", 2, 34), ("mpt-7b", 4, 26), ("llama-2-70b", 4, 154),
                             ("llama-2-70b", 8, 114))],
    *[Case("D", f"D: MPT-7B, 1xA100-40GB, static batch {b}, 512/64", "mpt-7b", "A100-40GB", 1, "trtllm", "static", b,
           {"request_throughput": rps}, isl=512, osl=64) for b, rps in ((1, 0.9), (64, 12.5))],
    Case("E", "E: Llama-3.1-8B, 1xH100, vLLM u=0.9", "llama-3.1-8b", "H100-SXM", 1, "vllm", "memory", 0,
         {"weights_gib_per_gpu": 14.99, "kv_gib_per_gpu": 51.38}),
    Case("E", "E: Llama-3.3-70B FP8, 2xH100 TP2, vLLM u=0.9", "llama-3.3-70b", "H100-SXM", 2, "vllm", "memory", 0,
         {"weights_gib_per_gpu": 33.88, "kv_gib_per_gpu": 32.0}, "fp8"),
    # the same page's other runs that load (one H100, u = 0.9), read once the catalog had their models
    *[Case("E", f"E: {name}, 1xH100, vLLM u=0.9", model, "H100-SXM", 1, "vllm", "memory", 0,
           {"weights_gib_per_gpu": weights, "kv_gib_per_gpu": kv}, dtype)
      for name, model, dtype, weights, kv in (("Qwen3-0.6B", "qwen3-0.6b", "bf16", 1.12, 64.45),
                                              ("Qwen3-32B", "qwen3-32b", "bf16", 61.03, 4.45),
                                              ("gpt-oss-20b MXFP4", "gpt-oss-20b", "mxfp4", 13.47, 50.28),
                                              ("gpt-oss-120b MXFP4", "gpt-oss-120b", "mxfp4", 64.38, 3.33))],
]
# Row A's published runs count tokens with Llama-3's tokenizer: 4281.5 output tok/s at 22.03 req/s is 194.3
# output tokens per request. The bundled tokenizer's ShareGPT sample is rescaled to that mean.
ROW_A_MEAN_OUTPUT = 4281.5 / 22.03


def sharegpt_row_a(base: Workload) -> Workload:
    return base.scaled(ROW_A_MEAN_OUTPUT / base.mean_output, f"rescaled to row A's {ROW_A_MEAN_OUTPUT:.1f} "
                                                             "output tokens per request (Llama-3 tokenizer)")


def published_start(mem: MemoryPlan, needed: int) -> MemoryPlan:
    """Tail term `published start`: vLLM will not start unless its pool holds one request of --max-model-len
    (`vllm_kv_needed`), so a published run whose command is printed had at least that pool; where the memory
    account leaves less, the account is wrong for that setup and the run gets the least pool it could have had."""
    if mem.kv_tokens >= needed:
        return mem
    return replace(mem, kv_per_gpu=needed * mem.kv_bytes_per_token, kv_tokens=needed)


def predict(case: Case, sharegpt: Workload | None) -> dict:
    model, gpu = models.model(case.checkpoint or case.model), gpus.gpu(case.gpu)
    engine = engines.profile(case.engine, gpu).with_knobs(**case.knobs)
    if not case.streamed:
        engine = engine.with_knobs(stream_token_cost=0.0, ingest_cost=0.0)
    mem = plan_memory(model, gpu, case.tp, case.weight_dtype, case.kv_dtype, engine)
    if case.served_len is not None and engine.kv_accounting == "profile" and mem.fits:
        mem = published_start(mem, vllm_kv_needed(model, case.served_len or model.max_positions, engine))
    if case.mode == "memory":
        return {"weights_gib_per_gpu": mem.weights_per_gpu / GiB, "kv_gib_per_gpu": mem.kv_per_gpu / GiB}
    if not mem.fits:  # a setup the planner cannot hold: no figure, rather than a simulation of nothing
        why = describe_misfit(model, gpu, case.isl + case.osl or 1, case.tp, weight_dtype=case.weight_dtype,
                              kv_dtype=case.kv_dtype, engine=engine)
        raise ValueError(f"{case.what}: {why}")
    if case.bench:
        roof = RooflineModel(model, gpu, case.tp, case.weight_dtype, case.kv_dtype, engine)
        work = mlperf.workload(case.bench, case.tokens_per_sample)
        shape = engine.shape(mem.kv_tokens, 0.0, model)
        return mlperf.predict(case, SimSetup(roof, shape, work, (0,), case.requests, True))
    if case.isl:
        n = case.requests
        work = Workload(np.full(n, case.isl), np.full(n, case.osl), f"{case.isl}/{case.osl}")
    elif case.sharegpt_means:
        work = sharegpt.with_means(*case.sharegpt_means)
    else:
        work = sharegpt_row_a(sharegpt)
    roof = RooflineModel(model, gpu, case.tp, case.weight_dtype, case.kv_dtype, engine)
    shape = engine.shape(mem.kv_tokens, case.prefix_hit_rate, model)
    setup = SimSetup(roof, shape, work, (0,), case.requests)
    if case.mode == "rate":
        return at_rate(setup, case.value)
    if case.mode == "concurrency":
        return at_concurrency(setup, int(case.value))
    if case.mode == "max":
        return max_throughput(setup, case.requests)
    batch = int(case.value)  # static: one batch sent at once
    return max_throughput(SimSetup(roof, shape, work, (0,), batch), batch)


def validate(cases: list[Case] | None = None, sharegpt: Workload | None = None) -> list[dict]:
    """Predicted beside published, one row per figure, with the relative error, its kind, the class of setup
    whose band applies, and whether the row was held out (never seen while choosing the priors)."""
    cases = CASES if cases is None else cases
    if sharegpt is None and any(not c.isl and c.mode != "memory" for c in cases):
        from llmbench.plan.workload import from_dataset

        sharegpt = from_dataset("sharegpt", {}, 1000)
    rows = []
    for case in cases:
        got = predict(case, sharegpt)
        load = got.get("utilization")
        for metric, published in case.published.items():
            value, what = got[metric], kind(metric)
            rows.append({"row": case.row, "case": case.what, "source": case.source or SOURCES[case.row],
                         "metric": metric, "kind": what,
                         "class": bands.figure_class(models.model(case.model), case.tp, what, load),
                         "held_out": case.row in HELD_OUT, "utilization": load,
                         "published": published, "predicted": value, "error": value / published - 1})
    return rows


def inside(row: dict) -> bool:
    low, high = bands.signed(bands.BANDS[row["class"]][row["kind"]])
    return low <= row["error"] <= high


def _medians(errors: list[float]) -> dict:
    e = np.array(errors)
    return {"figures": len(e), "median_abs": float(np.median(np.abs(e))), "median": float(np.median(e))}


def error_summary(rows: list[dict]) -> list[dict]:
    """Per half (tuning: the rows the priors were chosen on; held out: never tuned on) and kind of figure: how
    many, the median absolute and the median signed error, and how many fall inside their class's band."""
    out = []
    for part, held in (("tuning", False), ("held out", True)):
        for what in bands.KINDS:
            mine = [r for r in rows if r["held_out"] == held and r["kind"] == what]
            if mine:
                out.append({"part": part, "kind": what, **_medians([r["error"] for r in mine]),
                            "p99_constrained": sum(r["metric"] == "capacity" for r in mine),
                            "inside_band": sum(inside(r) for r in mine)})
    return out


def source_summary(rows: list[dict]) -> list[dict]:
    """Per source and kind of figure, the same counts and medians as `error_summary`: where a half's median comes
    from (one source with most of a half's figures sets its median)."""
    out = []
    for source in dict.fromkeys(r["row"] for r in rows):
        for what in bands.KINDS:
            errors = [r["error"] for r in rows if r["row"] == source and r["kind"] == what]
            if errors:
                out.append({"row": source, "held_out": source in HELD_OUT, "kind": what, **_medians(errors)})
    return out
