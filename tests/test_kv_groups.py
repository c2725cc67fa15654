"""vLLM's KV block accounting beyond one pool for all layers: hybrid KV groups (sliding-window layers hold their
window only; a preempted request's cache is found whole or not at all) and whole-prompt admission (0.19 on)."""

from dataclasses import replace

import numpy as np
import pytest

from llmbench.plan import engines, gpus, models
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.model_spec import ModelSpec
from llmbench.plan.scheduler import Scheduler
from llmbench.plan.sequence import Request
from llmbench.plan.simulator import simulate

HYBRID = dict(keep_preempted=True, kv_groups=(1, 1), window=128)


def spec(layers: int, sliding: int) -> ModelSpec:
    return ModelSpec("m", layers, 1024, 8, 8, 128, 4096, 1000, sliding_window=128 if sliding else None,
                     sliding_layers=sliding)


def test_kv_groups_follow_vllms_grouping():
    """Layers of one type in groups of one size: the fewer type's count, the larger's when under 1.5x it."""
    assert models.model("gpt-oss-20b").kv_groups == models.model("gpt-oss-120b").kv_groups == (1, 1)
    assert models.model("llama-3.1-8b").kv_groups == (1, 0)
    assert spec(12, 10).kv_groups == (1, 5)  # Gemma-3's 5:1: groups of 2 layers
    assert spec(25, 12).kv_groups == (1, 1)  # 12 sliding + 13 full: one group of 13 each (one padding layer)
    assert spec(8, 8).kv_groups == (0, 1)


def test_a_sliding_group_holds_the_window_and_gives_back_what_slides_out():
    """In a pool of two groups a request holds every block of its tokens in the full group and, in the sliding
    one, only those not wholly before max(0, computed - W + 1); what slides out returns to the pool."""
    sched = Scheduler(EngineShape(8, 4096, 1600, 16, **HYBRID))
    assert sched.free == 200  # 100 blocks of a full-attention model's pool, twice over
    assert Scheduler(EngineShape(8, 4096, 1600, 16, **HYBRID, null_blocks=1)).free == 199  # vLLM's null block
    assert sched.held(0, 1000) == 63 + 63 and sched.held(1000, 1001) == 63 + 63 - 54  # (1000 - 128 + 1) // 16 skipped
    r = Request(0.0, 1000, 50)
    sched.waiting.append(r)
    sched.admit(4096, [])
    assert r.blocks == 126 and sched.free == 74  # the whole prompt in one step: both groups cover it
    r.computed = 1000
    assert sched.grow(r, 1) and r.blocks == 72 and sched.free == 128  # the sliding group drops what slid out
    assert sum(s[1] for s in sched.pool) == sched.free


def test_a_long_prompt_that_a_single_pool_cannot_hold_runs_in_hybrid_groups():
    """32,000-token prompts in a 40,000-token pool: counted as full attention two cannot run side by side and
    preempt; in hybrid groups the sliding layers hold 128 tokens each and both run."""
    prompts, outputs = np.full(2, 32000), np.full(2, 50)

    class Clock:
        def step_time(self, prefill, decodes, *args, **kwargs):
            return 1e-5 * prefill + 0.01

    one = simulate(np.zeros(2), prompts, outputs, Clock(), EngineShape(8, 8192, 40000, 16, keep_preempted=True))
    two = simulate(np.zeros(2), prompts, outputs, Clock(), EngineShape(8, 8192, 40000, 16, **HYBRID))
    assert one.preemptions > 0 and two.preemptions == 0 and two.duration < one.duration


def test_a_preempted_hybrid_request_finds_its_cache_whole_or_not_at_all():
    """Its sliding group's blocks before the last window were freed earlier, so once any of its own blocks is
    evicted no window of cached blocks remains: nothing is found (a single pool keeps its leading blocks)."""
    for groups, found in (((1, 1), 0), ((1, 0), 16)):
        sched = Scheduler(EngineShape(8, 256, 320, 16, keep_preempted=True, kv_groups=groups, window=32))
        r = Request(0.0, 64, 8)
        r.computed, r.blocks = 40, sched.held(0, 40)  # two full blocks and a partial one, in each group
        sched.take(r.blocks)
        sched.release(r, preempted=True)
        r.computed = 0
        assert r.kept == 2 and sched._cached(r) == 32
        sched.take(sched.free - sum(s[1] for s in sched.pool if s[0] is r) + 1)  # up to one of its blocks
        assert sched._cached(r) == found


def test_a_sparse_window_cache_keeps_only_the_prompts_end():
    """vLLM 0.23 on: a sliding group caches only the blocks a hit could end on, the prompt's last whole block, so a
    preempted request finds at most its prompt: here only while it holds the blocks that hit needs, as none was left
    behind cached (the next test has one that was)."""
    for computed, kept in ((190, 0), (200, 12), (207, 12), (208, 0), (300, 0)):
        sched = Scheduler(EngineShape(8, 256, 16000, 16, **HYBRID, sparse_window=True))
        r = Request(0.0, 200, 200)
        r.computed, r.blocks = computed, sched.held(computed - 1, computed)
        sched.take(r.blocks)
        sched.release(r, preempted=True)
        assert r.kept == kept, computed
    dense = Scheduler(EngineShape(8, 256, 16000, 16, **HYBRID))
    r = Request(0.0, 200, 200)
    r.computed, r.blocks = 300, dense.held(299, 300)
    dense.take(r.blocks)
    dense.release(r, preempted=True)
    assert r.kept == 18  # 0.10-0.22: every whole block it computed


def test_a_sparse_window_cache_frees_uncached_blocks_first_and_pins_a_junction():
    """vLLM 0.32 (read in `BlockPool.free_blocks`, `reachable_block_mask`, `get_computed_blocks`): a sliding group's
    blocks without a hash go to the pool's head, reused first; re-admitted with only its full group's blocks found,
    a request pins their end (vLLM 0.26+'s junction) and its sliding group keeps the tail a hit there needs as it
    computes past it, so when it is preempted again it finds them; the full group's blocks stay its own until the
    eviction reaches them, its sliding ones going first."""
    shape = EngineShape(8, 256, 16000, 32, **HYBRID | {"window": 64}, sparse_window=True, junction=True)
    sched = Scheduler(shape)
    r = Request(0.0, 434, 10)
    r.computed, r.blocks = 252, sched.held(0, 252)  # one 252-token chunk: 8 blocks in each group, none given back
    sched.take(r.blocks)
    sched.release(r, preempted=True)
    assert r.kept == 0 and r.cached_full == 7  # no hit (its prompt's end not reached), 7 full-group blocks cached
    assert [s[0] for s in sched.pool] == [None, r] and sched.pool[1][1] == 7  # the 9 uncached ones at the head
    r.computed = 0
    sched.waiting.append(r)
    batch = []
    sched.admit(252, batch)
    assert batch == [(r, 252)] and r.junction == 7 and not any(s[0] is r for s in sched.pool)
    r.computed = 252  # the same chunk again, past the junction
    sched.release(r, preempted=True)
    assert r.kept == 7 and sched._cached(r) == 224  # found at its junction: 7 blocks
    off = Scheduler(replace(shape, junction=False))
    q = Request(0.0, 434, 10)
    q.computed, q.blocks = 252, off.held(0, 252)
    off.take(q.blocks)
    off.release(q, preempted=True)
    q.computed = 0
    off.waiting.append(q)
    off.admit(252, [])
    assert q.junction == 0  # before 0.26 nothing is pinned

    class Clock:
        def step_time(self, prefill, decodes, *args, **kwargs):
            return prefill * 1e-4 + (decodes > 0) * 0.01

    uncached = replace(shape, keep_preempted=False, kv_capacity_tokens=2000)  # --no-prefix-caching: no pool to keep
    res = simulate(np.zeros(30), np.full(30, 300), np.full(30, 100), Clock(), uncached)
    assert res.preemptions > 0 and res.output_tokens == 3000


def test_hybrid_groups_keep_every_block_counted(monkeypatch):
    """A burst that outgrows a hybrid pool: the pool always holds exactly the free blocks, and keeping a preempted
    request's cache still saves recompute (when none of it was evicted): 2,389 prompt tokens again against 3,337."""
    take = Scheduler.take

    def counted(self, n):
        take(self, n)
        assert self.pool is None or sum(s[1] for s in self.pool) == self.free >= 0
        assert self.pool is None or all(s[0] is None or s[0].kept > 0 for s in self.pool)

    monkeypatch.setattr(Scheduler, "take", counted)
    rng = np.random.default_rng(3)
    n = 60
    prompts, outputs = rng.integers(300, 900, n), rng.integers(20, 400, n)

    class Clock:
        tokens = 0

        def step_time(self, prefill, decodes, *args, **kwargs):
            Clock.tokens += prefill
            return prefill * 1e-4 + (decodes > 0) * 0.01

    again = {}
    for keep in (True, False):
        Clock.tokens = 0
        res = simulate(np.zeros(n), prompts, outputs, Clock(), EngineShape(64, 2048, 4000, 16, **HYBRID | {
            "keep_preempted": keep}))
        assert res.preemptions > 0 and len(res.ttft) == n and res.output_tokens == outputs.sum()
        again[keep] = Clock.tokens - prompts.sum()
    assert 0 < again[True] < again[False]


def test_whole_prompt_admission_waits_for_the_whole_sequence():
    """vLLM 0.19 on: a waiting request joins only when its whole sequence's blocks are free, not its first
    chunk's; nothing is reserved by the check."""
    for whole, joins in ((False, True), (True, False)):
        sched = Scheduler(EngineShape(8, 256, 1600, 16, admit_whole=whole))  # 100 blocks
        sched.take(60)
        r = Request(0.0, 1000, 10)  # 63 blocks, a first chunk of 16
        sched.waiting.append(r)
        batch = []
        sched.admit(256, batch)
        assert bool(batch) == joins and sched.reserved == 0
    sched = Scheduler(EngineShape(8, 256, 1600, 16, admit_whole=True, kv_groups=(1, 1), window=128))
    # the sliding group's cap: window and a step's tokens, and a block more (`max_admission_blocks_per_request`)
    assert sched._whole(Request(0.0, 1000, 10)) == 63 + 24 + 1
    hit = Request(0.0, 200, 10)
    hit.kept = 10  # a cache hit of 160 tokens: the sliding blocks before its window are not needed
    assert sched._whole(hit) == 13 + 13 - (160 - 127) // 16


def test_the_versions_that_bring_each_rule():
    h100, oss, llama = gpus.gpu("H100"), models.model("gpt-oss-20b"), models.model("llama-3.1-8b")
    shape = {v: engines.profile(v, h100).shape(10**6, 0.0, oss) for v in ("vllm@0.9", "vllm@0.10", "vllm@0.18",
                                                                          "vllm@0.19", "vllm", "sglang")}
    assert {v: s.kv_groups for v, s in shape.items()} == {"vllm@0.9": (1, 0), "vllm@0.10": (1, 1),
                                                           "vllm@0.18": (1, 1), "vllm@0.19": (1, 1),
                                                           "vllm": (1, 1), "sglang": (1, 0)}
    assert [v for v, s in shape.items() if s.admit_whole] == ["vllm@0.19", "vllm"]
    assert [v for v, s in shape.items() if s.sparse_window] == ["vllm"]  # 0.23 on, hybrid only
    assert not engines.profile("vllm", h100).shape(10**6, 0.0, llama).sparse_window
    assert engines.profile("vllm", h100).shape(10**6, 0.0, llama).kv_groups == (1, 0)
    assert shape["vllm"].window == 128 and shape["sglang"].window == 0


def decoding(sched: Scheduler, computed: int, output: int = 100) -> Request:
    """A running request that has just decoded its first token at `computed` tokens, its blocks taken."""
    r = Request(0.0, computed, output)
    r.computed, r.generated, r.delivered, r.last_delivery = computed, 1, 1, 0.0
    r.blocks = sched.held(computed - 1, computed)
    sched.take(r.blocks)
    sched.running.append(r)
    return r


@pytest.mark.parametrize("window", [128, 129])  # 129: a block is taken and one given back in the same step
@pytest.mark.parametrize("computed", [303, 304, 400, 129, 60])
def test_a_stretch_takes_and_gives_what_stepping_does(computed, window):
    """The fast path's blocks over 40 decodes: taken and given back as 40 single steps take and give them."""
    sched = Scheduler(EngineShape(8, 4096, 16000, 16, **HYBRID | {"window": window}))
    r = decoding(sched, computed)
    take, give = sched._stretch(r, 40)
    free, blocks, taken, given = sched.free, r.blocks, 0, 0
    for _ in range(40):
        need = sched.blocks_for(r, 1)
        taken, given = taken + max(need, 0), given + max(-need, 0)
        assert sched.grow(r, 1)
        r.computed += 1
    assert (take, give) == (taken, given) and r.blocks == blocks + take - give and sched.free == free - take + give


def test_the_fast_path_waits_when_a_window_gives_back_a_waiting_requests_block():
    """Stepping, a decode's sliding group gives a block back before it takes one, so a waiting request one block
    short now joins a step later: the fast path must not run past that."""
    sched = Scheduler(EngineShape(8, 4096, 1600, 16, **HYBRID))
    decoding(sched, 303)  # its next step drops a block of its window and takes none
    sched.take(1)
    assert sched.free == 171
    sched.waiting.append(Request(0.0, 1376, 10))  # 86 blocks in each group: one short

    class Clock:
        def step_time(self, *args, **kwargs):
            return 0.01

    assert sched.fast_forward(Clock(), 0.0, float("inf"), []) is None
