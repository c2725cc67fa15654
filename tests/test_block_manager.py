"""Property tests: random add/step/abort/fork sequences never leak, double-free or miscount blocks."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from engine.config import SamplingParams
from engine.llm import LLM
from engine.sequence import Sequence

BLOCK_BYTES_TINY = 2 * 2 * 16 * 2 * 16 * 4


def check_invariants(llm: LLM) -> None:
    bm = llm.block_manager
    live = [s for r in llm.requests.values() for s in r.seqs if not s.is_finished]
    refs = Counter(b for s in live for b in s.block_table)
    for block in bm.blocks:
        assert block.ref_count == refs.get(block.block_id, 0), f"block {block.block_id}"
        assert (block.ref_count == 0) == (block.block_id in bm.free)
    for h, block_id in bm.cached.items():
        assert bm.blocks[block_id].hash == h
    for s in live:
        assert len(set(s.block_table)) == len(s.block_table)


@pytest.fixture(scope="module")
def engine(tiny_model):
    return LLM(tiny_model, kv_cache_memory=BLOCK_BYTES_TINY * 40, max_model_len=400, max_num_batched_tokens=64,
               max_num_seqs=6)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 120), st.integers(1, 3), st.integers(1, 30), st.integers(0, 3)),
        st.tuples(st.just("step"), st.integers(1, 4)),
        st.tuples(st.just("abort"), st.integers(0, 50)),
    ),
    min_size=1, max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_random_operations_keep_blocks_consistent(engine, ops):
    shared = list(range(100, 180))
    next_id = 0
    for op in ops:
        if op[0] == "add":
            _, length, n, max_tokens, prefix_blocks = op
            prompt = shared[: 16 * prefix_blocks] + [3 + (next_id * 7 + i) % 15000 for i in range(length)]
            engine.add_request(f"r{next_id}", prompt[:390], SamplingParams(n=n, temperature=1.0, seed=next_id,
                                                                            max_tokens=max_tokens, ignore_eos=True))
            next_id += 1
        elif op[0] == "step":
            for _ in range(op[1]):
                engine.step()
        else:
            ids = list(engine.requests)
            if ids:
                engine.abort(ids[op[1] % len(ids)])
        check_invariants(engine)
    while engine.has_unfinished():
        engine.step()
        check_invariants(engine)
    assert not engine.requests
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_lru_keeps_prefix_and_reuses_unhashed_first():
    bm = BlockManager(num_blocks=6, block_size=4)
    seq = Sequence("a", list(range(10)), SamplingParams())
    bm.update_hashes(seq)
    assert bm.allocate(seq, 10)
    seq.num_computed_tokens = 10
    bm.register_computed(seq)
    table = list(seq.block_table)
    bm.free_sequence(seq)
    order = list(bm.free)
    # the partial (unhashed) block is reused first, then the cached suffix before the cached prefix
    assert order[0] == table[2] and order.index(table[1]) < order.index(table[0])
    again = Sequence("b", list(range(9)) + [99], SamplingParams())
    bm.update_hashes(again)
    hits = bm.cached_prefix(again)
    assert hits == table[:2]
    assert bm.allocate(again, 10 - 8, 0, hits)
    assert again.num_computed_tokens == 8 and again.block_table[:2] == table[:2]


def test_copy_on_write_after_fork():
    bm = BlockManager(num_blocks=8, block_size=4)
    parent = Sequence("p", list(range(6)), SamplingParams())
    bm.update_hashes(parent)
    assert bm.allocate(parent, 6)
    parent.num_computed_tokens = 6
    child = parent.fork(1)
    bm.fork(parent, child)
    assert bm.blocks[parent.block_table[1]].ref_count == 2
    for s in (parent, child):
        s.token_ids.append(42)
    assert bm.allocate(child, 1)
    copies = bm.take_copies()
    assert copies == [(parent.block_table[1], child.block_table[1])]
    assert child.block_table[0] == parent.block_table[0]  # the full block stays shared
    assert bm.allocate(parent, 1) and not bm.take_copies()  # parent now owns its block alone


def test_reset_prefix_cache_only_when_no_block_is_in_use():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = Sequence("a", list(range(10, 22)), SamplingParams())
    bm.update_hashes(seq)
    assert bm.allocate(seq, 12)
    seq.num_computed_tokens = 12
    bm.register_computed(seq)
    assert not bm.reset_prefix_cache() and bm.cached
    bm.free_sequence(seq)
    again = Sequence("b", list(range(10, 22)), SamplingParams())
    bm.update_hashes(again)
    assert bm.cached_prefix(again)
    assert bm.reset_prefix_cache() and not bm.cached and not bm.cached_prefix(again)
