"""Internal waste on a ShareGPT sample: paged wastes under one block per live sequence."""

import pytest

from bundled.sharegpt import load as load_sharegpt
from engine.config import SamplingParams
from engine.llm import LLM
from llmbench.datasets.sharegpt import sample_pairs


@pytest.fixture(scope="module")
def sample(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    return sample_pairs(load_sharegpt().conversations, 48, lambda t: len(tok(t).input_ids), seed=0)


def _waste(tiny_model, sample, layout):
    llm = LLM(tiny_model, kv_layout=layout, kv_cache_memory=64 * 2**20, max_model_len=2048,
              max_num_batched_tokens=4096, enable_prefix_caching=False)
    for i, pair in enumerate(sample):
        llm.add_request(str(i), pair.prompt, SamplingParams(temperature=0, max_tokens=pair.output_len,
                                                            ignore_eos=True))
    ratios = []
    for _ in range(12):
        llm.step()
        usage = llm.block_manager.usage(llm.scheduler.running)
        ratios.append(usage.wasted_slots / usage.live_seqs)
    return max(ratios)


def test_paged_waste_below_one_block(tiny_model, sample):
    paged = _waste(tiny_model, sample, "paged")
    contiguous = _waste(tiny_model, sample, "contiguous")
    print(f"wasted slots per live sequence: paged {paged:.1f}, contiguous {contiguous:.1f}")
    assert paged < 16
    assert contiguous > 10 * paged
