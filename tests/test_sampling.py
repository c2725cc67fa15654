import pytest
import torch

from engine.config import SamplingParams
from engine.llm import LLM
from engine.sampler import apply_filters


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(tiny_model, kv_cache_memory=16 * 2**20, max_num_batched_tokens=64)


PROMPT = "Write a short poem about the sea and the wind."


def test_seed_is_reproducible_across_batches(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=20, ignore_eos=True)
    alone = llm.generate([PROMPT], params)[0].outputs[0].token_ids
    crowd = llm.generate([PROMPT, "other text " * 30, "more"], [params, SamplingParams(temperature=1.0),
                                                                 SamplingParams(temperature=0.5)])
    assert crowd[0].outputs[0].token_ids == alone
    other_seed = llm.generate([PROMPT], SamplingParams(temperature=1.0, seed=99, max_tokens=20, ignore_eos=True))
    assert other_seed[0].outputs[0].token_ids != alone


def test_n_outputs_fork_and_differ(llm):
    out = llm.generate([PROMPT], SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=12, ignore_eos=True))[0]
    assert [o.index for o in out.outputs] == [0, 1, 2, 3]
    assert all(len(o.token_ids) == 12 and o.finish_reason == "length" for o in out.outputs)
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1
    assert llm.block_manager.usage().used == 0


def test_greedy_n_outputs_are_identical(llm):
    out = llm.generate([PROMPT], SamplingParams(n=3, temperature=0, max_tokens=10, ignore_eos=True))[0]
    assert len({tuple(o.token_ids) for o in out.outputs}) == 1


def test_stop_string_and_token(llm):
    base = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0].outputs[0]
    stop_text = base.text[10:14]
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=30, stop=[stop_text]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop_text
    assert out.text == base.text[: base.text.index(stop_text)]
    token = base.token_ids[5]
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[token]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == token
    assert out.token_ids == base.token_ids[: base.token_ids.index(token) + 1]


def test_min_tokens_blocks_stop_tokens(llm):
    base = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0].outputs[0]
    first = base.token_ids[0]
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8, stop_token_ids=[first],
                                                min_tokens=3))[0].outputs[0]
    assert first not in out.token_ids[:3]


def test_logprobs_and_text(llm):
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=5, logprobs=3, ignore_eos=True))[0]
    comp = out.outputs[0]
    assert len(comp.logprobs) == 5
    for token, entry in zip(comp.token_ids, comp.logprobs, strict=True):
        assert token in entry and entry[token] == max(entry.values()) and len(entry) == 3
    assert comp.text == llm.tokenizer.decode(comp.token_ids, skip_special_tokens=True)


def test_filters():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    probs = apply_filters(logits, 1.0, top_k=2, top_p=1.0, min_p=0.0)
    assert (probs[2:] == 0).all() and probs[:2].sum().item() == pytest.approx(1.0)
    full = torch.softmax(logits, -1)
    probs = apply_filters(logits, 1.0, top_k=0, top_p=float(full[0]) + 1e-4, min_p=0.0)
    assert (probs[2:] == 0).all() and probs[1] > 0
    probs = apply_filters(logits, 1.0, top_k=0, top_p=1.0, min_p=0.2)
    assert (probs >= 0.2 * full[0] * 0.99).sum() == (probs > 0).sum() and probs[-1] == 0


def test_invalid_params():
    for kwargs in [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(n=0), dict(max_tokens=0)]:
        with pytest.raises(ValueError):
            SamplingParams(**kwargs)


def test_prompt_too_long(llm):
    with pytest.raises(ValueError, match="max_model_len"):
        llm.add_request("long", list(range(3, 3 + llm.max_model_len)))
