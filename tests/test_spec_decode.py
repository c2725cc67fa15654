"""Speculative decoding: greedy outputs unchanged, sampling lossless, draft checked at start-up."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch
from scipy import stats

from bundled.modelbuild import build_model
from engine.config import SamplingParams
from engine.llm import LLM
from engine.serve.metrics import EngineMetrics
from engine.spec.ngram import propose_ngram
from engine.spec.rejection_sampler import verify


@pytest.fixture(scope="module")
def tiny_draft(tiny_model):
    return build_model("tiny-draft")


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, 16000) for _ in range(rng.randint(1, 300))] for _ in range(n)]
    shared = [rng.randrange(3, 16000) for _ in range(48)]  # prefix-cache hits on blocks both pools computed
    return prompts + [[5, 6, 7, 8, 9] * 20, list(range(100, 140)) * 3] + [shared + [i, i + 1] for i in (7, 8, 9)]


@pytest.fixture(scope="module")
def greedy_reference(tiny_model):
    llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, max_num_batched_tokens=128)
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(30), params)]


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculation_changes_no_token(tiny_model, tiny_draft, greedy_reference, proposer, k):
    spec = str(tiny_draft) if proposer == "draft" else "ngram"
    llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, max_num_batched_tokens=128, speculative_model=spec,
              num_speculative_tokens=k)
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    out = [o.outputs[0].token_ids for o in llm.generate(_prompts(30), params)]
    assert out == greedy_reference
    totals = llm.stats.totals
    assert totals["num_draft_tokens"] > 0 and 0 < totals["num_accepted_tokens"] <= totals["num_draft_tokens"]


def test_speculation_survives_preemption_and_small_pool(tiny_model, tiny_draft, greedy_reference):
    llm = LLM(tiny_model, kv_cache_memory=600 * 1024, max_num_batched_tokens=128, speculative_model=str(tiny_draft),
              num_speculative_tokens=3, max_model_len=512)
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    out = [o.outputs[0].token_ids for o in llm.generate(_prompts(30), params)]
    assert llm.stats.totals["num_preemptions"] > 0
    assert out == greedy_reference


def test_disable_by_batch_size(tiny_model, tiny_draft, greedy_reference):
    llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, max_num_batched_tokens=128, speculative_model=str(tiny_draft),
              num_speculative_tokens=3, speculative_disable_by_batch_size=4)
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    out = [o.outputs[0].token_ids for o in llm.generate(_prompts(30), params)]
    assert out == greedy_reference
    steps = list(llm.stats.steps)
    assert all(s.num_drafts == 0 for s in steps if s.num_seqs > 4)
    assert any(s.num_drafts > 0 for s in steps)


def test_stops_and_max_tokens_hold_under_speculation(tiny_model, tiny_draft):
    base = LLM(tiny_model, kv_cache_memory=8 * 2**20)
    spec = LLM(tiny_model, kv_cache_memory=8 * 2**20, speculative_model=str(tiny_draft), num_speculative_tokens=5)
    prompt = _prompts(1, seed=3)[0]
    free = base.generate([prompt], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0]
    stop = free.outputs[0].token_ids[7]
    for params in (SamplingParams(temperature=0, max_tokens=11, ignore_eos=True),
                   SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop]),
                   SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop], min_tokens=12, logprobs=2)):
        a = base.generate([prompt], params)[0].outputs[0]
        b = spec.generate([prompt], params)[0].outputs[0]
        assert (a.token_ids, a.finish_reason, a.stop_reason) == (b.token_ids, b.finish_reason, b.stop_reason)
        if params.logprobs:
            assert [sorted(x) for x in a.logprobs] == [sorted(x) for x in b.logprobs]


def _chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    probs = np.asarray(probs, dtype=np.float64)
    keep = probs > 0
    return float(stats.chisquare(counts[keep], probs[keep] / probs[keep].sum() * counts.sum()).pvalue)


@pytest.mark.parametrize("one_hot", [False, True])
def test_rejection_sampling_reproduces_the_target_distribution(one_hot):
    """Every emitted position follows p exactly; 30k draws resolve a 1-point distortion (checked too). The
    one-hot (n-gram) proposer takes the same path with q = 1 on the draft; 20k draws check it."""
    g = torch.Generator().manual_seed(0)
    vocab, k, draws = 6, 3, 20_000 if one_hot else 30_000
    logits = torch.randn(k + 1, vocab, generator=g) * 1.5
    q = torch.softmax(torch.randn(k, vocab, generator=g), -1)
    params = SamplingParams(temperature=0.8, top_p=0.95)
    from engine.sampler import apply_filters

    p = torch.stack([apply_filters(row, 0.8, 0, 0.95, 0.0) for row in logits]).numpy()
    counts = np.zeros((k + 1, vocab))
    for _ in range(draws):
        if one_hot:
            drafts = [int(torch.randint(vocab, (1,), generator=g)) for _ in range(k)]
            tokens, _ = verify(logits.clone(), drafts, None, params, g)
        else:
            drafts = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(k)]
            tokens, _ = verify(logits.clone(), drafts, q, params, g)
        for pos, token in enumerate(tokens):
            counts[pos, token] += 1
    for pos in range(k + 1):
        assert _chi_square_pvalue(counts[pos], p[pos]) > 1e-3, (pos, counts[pos] / counts[pos].sum(), p[pos])
    if one_hot:
        return
    distorted = p[0] + np.where(np.arange(vocab) == p[0].argmax(), -0.01, 0.0) + np.where(
        np.arange(vocab) == p[0].argmin(), 0.01, 0.0)
    assert _chi_square_pvalue(counts[0], distorted) < 1e-3  # the test would see a 1-point shift


def test_greedy_verification_rule():
    logits = torch.full((4, 5), -1.0)
    for pos, best in enumerate([2, 3, 1, 4]):
        logits[pos, best] = 1.0
    params = SamplingParams(temperature=0)
    assert verify(logits, [2, 3, 1], None, params) == ([2, 3, 1, 4], 3)  # all accepted + bonus
    assert verify(logits, [2, 0, 1], None, params) == ([2, 3], 1)  # up to and including the mismatch


def test_sampled_speculation_matches_plain_sampling_end_to_end(tiny_model, tiny_draft):
    """Distribution of the first four generated tokens, with and without a draft (two-sample chi-square)."""
    prompt = [11, 12, 13, 14, 15]
    draws = 1500

    def sample(**spec) -> np.ndarray:
        llm = LLM(tiny_model, kv_cache_memory=16 * 2**20, **spec)
        params = [SamplingParams(temperature=0.9, top_p=0.95, max_tokens=4, ignore_eos=True, seed=i)
                  for i in range(draws)]
        return np.array([o.outputs[0].token_ids for o in llm.generate([prompt] * draws, params)])

    plain = sample()
    spec = sample(speculative_model=str(tiny_draft), num_speculative_tokens=3)
    for pos in range(4):
        tokens = np.union1d(plain[:, pos], spec[:, pos])
        a = np.array([(plain[:, pos] == t).sum() for t in tokens])
        b = np.array([(spec[:, pos] == t).sum() for t in tokens])
        big = (a + b) >= 10
        table = np.vstack([np.append(a[big], a[~big].sum()), np.append(b[big], b[~big].sum())])
        table = table[:, table.sum(axis=0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, pos


def test_ngram_proposer_rules():
    assert propose_ngram([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2, 1, 3) == [9, 1]  # earliest, longest
    assert propose_ngram([1, 2, 3, 4], 3, 1, 3) == []
    assert propose_ngram([4, 5, 4], 5, 1, 2) == [5, 4]  # cut at the context's end
    assert propose_ngram([4, 5, 6, 5], 2, 2, 2) == []  # the 2-gram (6, 5) never occurred before


def test_draft_with_another_vocabulary_is_refused(tiny_model, tiny_draft, tmp_path):
    bad = tmp_path / "draft"
    shutil.copytree(tiny_draft, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(config | {"vocab_size": config["vocab_size"] + 64}))
    with pytest.raises(ValueError, match="vocab_size"):
        LLM(tiny_model, kv_cache_memory=8 * 2**20, speculative_model=str(bad), num_speculative_tokens=2)
    (bad / "config.json").write_text(json.dumps(config))
    tok = json.loads((bad / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (bad / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match="tokenizer"):
        LLM(tiny_model, kv_cache_memory=8 * 2**20, speculative_model=str(bad), num_speculative_tokens=2)


def test_spec_counters_in_metrics(tiny_model, tiny_draft):
    llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, speculative_model=str(tiny_draft), num_speculative_tokens=2)
    metrics = EngineMetrics("tiny")
    llm.add_request("r", _prompts(1)[0], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    while llm.has_unfinished():
        metrics.on_step(llm, llm.step())
    text = metrics.exposition().decode()
    drafted = llm.stats.totals["num_draft_tokens"]
    assert f'vllm:spec_decode_num_draft_tokens_total{{model_name="tiny"}} {float(drafted)}' in text
    assert "vllm:spec_decode_num_accepted_tokens_total" in text


def test_spec_decode_summary_from_scraped_counters():
    from llmbench.scrape import spec_decode_summary

    points = [{"t": 0.0, "spec_draft_tokens": 100.0, "spec_accepted_tokens": 40.0},
              {"t": 1.0, "spec_draft_tokens": 300.0, "spec_accepted_tokens": 160.0}]
    assert spec_decode_summary(points) == {"spec_draft_tokens": 200.0, "spec_accepted_tokens": 120.0,
                                           "spec_acceptance_rate": 0.6}
    assert spec_decode_summary([{"t": 0.0, "spec_draft_tokens": 5.0}] * 2) == {}  # no speculation: no columns
