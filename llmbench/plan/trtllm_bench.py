"""The batch limits `trtllm-bench throughput` picks when its command names none, as the commands of TensorRT-LLM's
performance overview (rows B and H) do: `tensorrt_llm/bench/build/tuning.py` (`calc_engine_setting`,
`finetune_setting`) sizes `max_batch_size` to the requests of the dataset's average ISL + OSL that fit the KV cache
(its own estimate: total GPU memory less the weights, times `--kv_cache_free_gpu_mem_fraction`, 0.90 by default),
rounded up, and `max_num_tokens` to that batch times (1 + ISL/OSL), rounded up, at least 2,048 and at most 32,768.
So a 1000/1000 run of Llama-3.1-8B FP8 on one H100 steps at most 2,048 tokens, not the library's 8,192."""

from __future__ import annotations

import math

from llmbench.plan import gpus, models
from llmbench.plan.gpus import GPU
from llmbench.plan.memory import BYTES, GiB
from llmbench.plan.model_spec import ModelSpec

# the page's $num_requests per ISL/OSL
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (500, 2000): 3000, (1000, 1000): 3000,
            (1000, 2000): 1500, (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (20000, 2000): 1000}
# trtllm-bench throughput's --enable_chunked_context defaults to on; the overview's yaml captures CUDA graphs, padded
RUN = {"chunked_prefill": True, "graphs": "trtllm-bench"}


def _rounded_up(value: float, tiers: tuple[tuple[float, int], ...], least: int) -> int:
    """`finetune_setting`'s rounding: up to a multiple of the first tier's step whose limit `value` is under."""
    step = next(step for limit, step in tiers if value < limit)
    return max(least, step * math.ceil(value / step))


def settings(model: ModelSpec, gpu: GPU, tp: int, weight_dtype: str, kv_dtype: str, isl: float, osl: float,
             kv_fraction: float = 0.90) -> dict:
    """`max_num_seqs` and `max_num_batched_tokens` as trtllm-bench's heuristic sets them (pipeline parallel 1)."""
    per_token = model.kv_bytes_per_token(BYTES[kv_dtype], tp) * tp / GiB  # its 2·L·max(TP, n_kv)·d·b, all GPUs
    available = gpu.memory / GiB * tp - model.params * BYTES[weight_dtype] / GiB  # every parameter at that width
    requests = available * kv_fraction / (per_token * (isl + osl))
    raw_bs = min(requests, 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    batch = _rounded_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), 64)
    tokens = _rounded_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048)
    return {"max_num_seqs": batch, "max_num_batched_tokens": tokens}


def knobs(model: str, gpu: str, tp: int, isl: int, osl: int) -> dict:
    """The engine knobs of one FP8 row of the page: context chunking, padded graphs and the heuristic's limits."""
    return RUN | settings(models.model(model), gpus.gpu(gpu), tp, "fp8", "fp8", isl, osl)
