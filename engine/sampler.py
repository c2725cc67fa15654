"""Turn each sequence's logits into its next token: greedy, temperature, top-k, top-p, min-p, seeds."""

from __future__ import annotations

import torch

from engine.sequence import Sequence


def apply_filters(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                  min_p: float) -> torch.Tensor:
    """Probabilities of one row after temperature, top-k, top-p and min-p (vLLM's order)."""
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass strictly above each token
        drop = before > top_p
        drop[0] = False
        probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0.0))
    if min_p > 0.0:
        probs = probs.masked_fill(probs < min_p * probs.max(), 0.0)
    return probs / probs.sum()


def banned_tokens(seq: Sequence, eos_ids: tuple[int, ...], ahead: int = 0) -> list[int]:
    """min_tokens: EOS and stop tokens cannot end a sequence that is still too short (`ahead` tokens on)."""
    if seq.num_output_tokens + ahead >= seq.params.min_tokens:
        return []
    return list(seq.params.stop_token_ids) + ([] if seq.params.ignore_eos else list(eos_ids))


def suppress_stops(logits: torch.Tensor, seqs: list[Sequence], eos_ids: tuple[int, ...]) -> None:
    for row, seq in enumerate(seqs):
        banned = banned_tokens(seq, eos_ids)
        if banned:
            logits[row, banned] = float("-inf")


def sample(logits: torch.Tensor, seqs: list[Sequence], eos_ids: tuple[int, ...] = ()) -> list[int]:
    """logits: [B, V] float32, one row per sequence. Returns one token id per sequence."""
    suppress_stops(logits, seqs, eos_ids)
    tokens = logits.argmax(dim=-1).tolist()
    for row, seq in enumerate(seqs):
        p = seq.params
        if p.greedy:
            continue
        probs = apply_filters(logits[row], p.temperature, p.top_k, p.top_p, p.min_p)
        tokens[row] = int(torch.multinomial(probs, 1, generator=seq.generator).item())
    return tokens


def top_logprobs(logits: torch.Tensor, tokens: list[int], seqs: list[Sequence]) -> list[dict[int, float] | None]:
    """The sampled token's logprob plus the top-N, for sequences that asked for logprobs."""
    wanted = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
    result: list[dict[int, float] | None] = [None] * len(seqs)
    if not wanted:
        return result
    logp = torch.log_softmax(logits[wanted], dim=-1)
    for j, row in enumerate(wanted):
        n = seqs[row].params.logprobs
        values, ids = logp[j].topk(n) if n else (torch.empty(0), torch.empty(0, dtype=torch.long))
        entry = {tokens[row]: float(logp[j, tokens[row]])}
        entry.update({int(i): float(v) for i, v in zip(ids.tolist(), values.tolist(), strict=True)})
        result[row] = entry
    return result
