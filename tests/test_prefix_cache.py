import random

from engine.config import SamplingParams
from engine.llm import LLM

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def test_shared_system_prompt_is_computed_once(tiny_model):
    rng = random.Random(0)
    system = [rng.randrange(3, 16000) for _ in range(1000)]
    questions = [[rng.randrange(3, 16000) for _ in range(20)] for _ in range(50)]
    llm = LLM(tiny_model, kv_cache_memory=64 * 2**20, max_num_batched_tokens=2048)
    for i, q in enumerate(questions):
        llm.add_request(f"r{i}", system + q, GREEDY)
    while llm.has_unfinished():
        llm.step()
    prefill = llm.stats.totals["num_prefill_tokens"]
    # 62 full blocks of the prefix are computed once; each request computes its 8-token tail + question
    assert prefill <= 1000 + 50 * (8 + 20)
    assert llm.stats.totals["prefix_hit_tokens"] == 49 * 992


def test_prefix_of_earlier_request_recomputes_only_last_token(tiny_model):
    llm = LLM(tiny_model, kv_cache_memory=16 * 2**20)
    rng = random.Random(1)
    long = [rng.randrange(3, 16000) for _ in range(160)]
    llm.generate([long], GREEDY)
    before = llm.stats.totals["num_prefill_tokens"]
    llm.generate([long[:96]], GREEDY)  # 96 tokens = 6 full cached blocks
    assert llm.stats.totals["num_prefill_tokens"] - before == 16  # vLLM: the last block is recomputed
    before = llm.stats.totals["num_prefill_tokens"]
    llm.generate([long[:97]], GREEDY)
    assert llm.stats.totals["num_prefill_tokens"] - before == 1


def test_prefix_caching_off_computes_everything(tiny_model):
    llm = LLM(tiny_model, kv_cache_memory=16 * 2**20, enable_prefix_caching=False)
    prompt = list(range(5, 205))
    llm.generate([prompt, prompt], GREEDY)
    assert llm.stats.totals["prefix_hit_tokens"] == 0
    assert llm.stats.totals["num_prefill_tokens"] == 400
