"""How one replica's engine is set up, as the simulated scheduler reads it: its limits, its KV pool, and the
switches of each engine's scheduling rules and tail terms (engines.py fills it from an engine profile)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineShape:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    kv_capacity_tokens: int = 10**7
    block_size: int = 16
    prefix_hit_rate: float = 0.0  # fraction of each prompt found in the prefix cache
    client_overhead: float = 0.0  # seconds added to TTFT and E2E (HTTP, tokenization)
    chunked_prefill: bool = True
    scheduler_steps: int = 1
    reserve_output: bool = False  # TensorRT-LLM's GUARANTEED_NO_EVICT: admit only with blocks for the whole output
    burst_ingest: float = 0.001  # seconds for a closed loop's request to reach the engine after the one before it
    loop_overhead: float = 0.0  # more seconds outside the server's clock, each closed-loop request (`loop overhead`)
    ingest_cost: float = 0.0  # the API server's seconds a request (tail term `front-end ingest`; 0: none)
    ingest_parse_share: float = 0.0  # the share of them spent before it can be rendered (`front-end ingest`)
    whole_prompts: bool = False  # TensorRT-LLM without chunked context: a prompt joins a step only whole
    long_prefill_cap: int = 0  # vLLM's --long-prefill-token-threshold: one request's tokens a step (0: no cap)
    cap_lone_prefill: bool = True  # False from vLLM 0.31: a request alone in the scheduler is not capped
    # AMD's MLPerf patch of V0's scheduler (VLLM_LLAMA2_MLPERF_SCHED): (MAX, MIN, STEP, MIN_REQUIRE_PREFILL_GPU_BLOCK,
    # MIN_REQUIRE_PREFILL_QUERY); None: vLLM's own scheduler
    decode_target: tuple[int, int, int, int, int] | None = None
    # the ROCm fork's VLLM_SCHED_PREFILL_KVC_FREEPCT (MLPerf v4.1's Offline runs): a V0 invocation admits no new prompt
    # while fewer than this share of the KV blocks are free, checked where its _schedule_prefills is called: before
    # the decodes without chunked prefill, after them with it (0: no such rule)
    prefill_kv_free: float = 0.0
    keep_preempted: bool = False  # tail term `cached preemption`: a preempted request's blocks stay cached
    kv_groups: tuple[int, int] = (1, 0)  # tail term `hybrid KV groups`: (full-attention, sliding-window) groups
    window: int = 0  # the sliding groups' window in tokens (hybrid KV groups; 0: none)
    admit_whole: bool = False  # tail term `whole-prompt admission`: a waiting request's whole sequence must fit
    null_blocks: int = 0  # blocks the pool never hands out (vLLM V1's null block; 0 where a pool is thousands)
    sparse_window: bool = False  # tail term `sparse window cache`: a sliding group caches only its prompt's end
    junction: bool = False  # ... and the end of a re-admitted request's one-group hit (vLLM 0.26+)
    step_jitter: tuple[float, ...] = ()  # tail term `step jitter` (step_jitter.py): offsets (s) a step draws one of
