"""The engine flags of MLPerf runs as their submissions state them: a row's (batch, tokens[, steps]) read the way
each harness runs it, a run's own flags where its submission gives more (RedHat's vLLM), and the engine facts of
AMD's harnesses for the vLLM runs on MI300X/MI325X (v4.1's scripts, v5.1's harness_llm yamls)."""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from llmbench.plan import engines

DATA = Path(__file__).parent / "data"
CHUNKED_CONTEXTS = "v5.1"  # the round whose TensorRT-LLM configs chunk contexts


# RedHat's vLLM 0.10 runs (V1: chunked prefill) with the flags its README and scripts give for the submission
# (closed/RedHat/code/llama3.1-8b: README.md, run_offline_submission.sh, run_server_submission.sh) and its FP8
# checkpoint (measurements/*/llama3.1-8b/*/*.json: weight_data_types fp8; documentation/calibration.md: per-tensor
# FP8 weights and activations). The Offline harness drives vLLM's LLM class; the Server harness streams
# /v1/completions from `vllm serve` (SUT_VLLM_SingleReplica_Server.py, stream=True), so its tokens pass the API
# server's drain. Left out: --cuda-graph-sizes (vLLM 0.10 captures every 8 tokens up to it: 8 rows of padding at
# most), --max-model-len, the Server harness's --coalesce.
REDHAT = {
    "H100 Offline": {"max_num_seqs": 1024, "max_num_batched_tokens": 4096, "kv_dtype": "fp8"},
    "H100 Server": {"max_num_seqs": 512, "max_num_batched_tokens": 1024, "long_prefill_token_threshold": 256,
                    "gpu_memory_utilization": 0.91, "kv_dtype": "bf16", "streamed": True},
    "L40S Offline": {"max_num_seqs": 512, "max_num_batched_tokens": 16384, "long_prefill_token_threshold": 256,
                     "gpu_memory_utilization": 0.95, "kv_dtype": "fp8"},
    "L40S Server": {"gpu_memory_utilization": 0.96, "kv_dtype": "fp8", "streamed": True},
}


# v4.1's vLLM runs on MI300X (closed/{AMD,Dell}/code/llama2-70b-99.9, the same harness): Offline
# (test_VllmFp8_Offline_perf.sh) eager, --gpu-memory-utilization 0.99, block 16. Server: AMD's run_tests_Server.sh
# runs mainVllmFp8_SyncServer.py, whose argparse defaults override its dataclass (1,024 sequences, 49,152 tokens:
# the rows; gmu 0.97; --max-seq-len-to-capture 512, so V0 replays no graph once a batch holds a longer context)
# and batches queries (--gpu-batch-size 96, --batcher-threshold 0.3); Dell's runs mainVllmFp8_AsyncServer.py:
# its dataclass (graphs to 2,048 tokens of context, gmu 0.97) and batcher defaults (32, 0.4 s). The Offline script
# exports VLLM_SCHED_PREFILL_KVC_FREEPCT=31, which the ROCm fork's V0 scheduler they ran reads (Dell ships its copy,
# closed/Dell/docker/vllm/vllm/core/scheduler.py; ROCm/vllm's MLPerf_4.1 branch): no new prompt while fewer than 31 %
# of the KV blocks are free. (v5.1's harness sets 30, but the vLLM it built on, rocm/vllm-dev nightly_0610_rc2, has
# no code reading it.) Left out: the Offline harness's sorting of prompts.
V41_ROCM = {
    "offline": {"graphs": "", "gpu_memory_utilization": 0.99, "prefill_kv_free": 0.31},
    "AMD server": {"graphs": "", "gpu_memory_utilization": 0.97, "batcher": (96, 0.3)},
    "Dell server": {"gpu_memory_utilization": 0.97, "batcher": (32, 0.4)},
}


def v41_rocm(submitter: str, scenario: str) -> dict:
    """The harness facts of a v4.1 vLLM run on MI300X (V41_ROCM), with the block size and prefix caching both
    scenarios share."""
    facts = V41_ROCM.get(scenario) or V41_ROCM.get(f"{submitter} {scenario}", {})
    return {"block_size": 16, "prefix_caching": False, **facts}


def settings(cfg: tuple | dict | None, engine: str, round_: str, rocm: dict | None = None) -> dict:
    """Engine flags of a row's (batch, tokens[, steps]); vLLM rows on ROCm ran the V0 scheduler without
    chunked prefill (v4.1's configs say so), with the facts of AMD's harness (`rocm`: v41_rocm(), rocm_engines());
    TensorRT-LLM chunks contexts in v5.1 (every H200 config sets enable_chunked_context) and not in v4.1 (NVIDIA's
    harness, llm_core.cc, passes no chunking policy), and in both rounds schedules with MAX_UTILIZATION, not
    GUARANTEED_NO_EVICT, so it reserves no KV for a request's whole output (v4.1: harness_llm's main_llm.cc flag
    trtllm_batch_sched_policy defaults to max_util; v5.1: llmlib/config.py's default and every config's
    batch_scheduler_policy 'max_util'). A dict is a run's flags as its submission states them, with the KV dtype and
    whether its tokens were streamed."""
    knobs: dict = ({"chunked_prefill": round_ == CHUNKED_CONTEXTS, "reserve_output": False} if engine == "trtllm"
                   else {})
    if isinstance(cfg, dict):
        return knobs | cfg
    if cfg is None:
        return knobs
    knobs |= {"max_num_seqs": cfg[0], "max_num_batched_tokens": cfg[1]}
    if engine.startswith("vllm"):
        knobs["chunked_prefill"] = False
        if len(cfg) > 2:
            knobs["scheduler_steps"] = cfg[2]
        knobs |= rocm or {}
    return knobs


@cache
def rocm_engines() -> dict[tuple[str, str, str, str], dict]:
    """(bench, submitter, system, scenario) -> the engine facts of a v5.1 vLLM run on AMD's harness (data/
    mlperf_rocm_engines.csv): V0 (VLLM_USE_V1=0) takes V0's fixed costs whatever the version label, V1 chunked
    prefill and V1's; an eager run (enforce_eager) pads no CUDA graph; its memory share, block size, no prefix
    caching; a V0 run with VLLM_LLAMA2_MLPERF_SCHED, the patched scheduler's `decode_target`. Its launches without
    graphs have no term of their own."""
    with open(DATA / "mlperf_rocm_engines.csv", encoding="utf-8") as f:
        table = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out = {}
    for r in table:
        v1, eager = r["v1"] == "1", r["eager"] == "1"
        facts = {**(engines.V1_COSTS if v1 else engines.V0_COSTS), "chunked_prefill": v1,
                 "graphs": "" if eager else "vllm" if v1 else "vllm-v0", "gpu_memory_utilization": float(r["gmu"]),
                 "block_size": int(r["block_size"]), "prefix_caching": False}
        if r["decode_target"]:
            facts["decode_target"] = tuple(int(x) for x in r["decode_target"].split(":"))
        out[r["bench"], r["submitter"], r["system"], r["scenario"].lower()] = facts
    return out


def split(knobs: dict, dtype: str) -> tuple[dict, dict]:
    """A run's engine flags apart from the Case fields among them (its KV dtype, by default the weights')."""
    fields = {"kv_dtype": knobs.pop("kv_dtype", dtype)}
    for name in ("streamed", "batcher"):
        if name in knobs:
            fields[name] = knobs.pop(name)
    return knobs, fields
