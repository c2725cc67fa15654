"""Lossless verification of draft tokens (Leviathan et al. 2023; vLLM's rejection sampler).

The target scored `[last, d1..dk]` in one forward, giving k+1 distributions p. Draft token dᵢ, drawn from
the draft's q, is kept with probability min(1, p(dᵢ)/q(dᵢ)); at the first rejection a token is drawn from
normalize(max(p − q, 0)) and the rest are dropped; if all k survive, a bonus token comes from p at k+1.
The emitted tokens are then distributed exactly as if the target had sampled them one by one. A
deterministic proposer (n-gram) has a one-hot q. Greedy requests keep the target's argmax up to and
including the first position where it differs from the draft.
"""

from __future__ import annotations

import torch

from engine.config import SamplingParams
from engine.sampler import draw, filtered_probs


def verify(target_logits: torch.Tensor, drafts: list[int], draft_probs: torch.Tensor | None,
           params: SamplingParams, generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """target_logits [k+1, V] float32; draft_probs [k, V] (None: one-hot drafts).
    Returns the emitted tokens (1..k+1 of them) and how many drafts were accepted."""
    k = len(drafts)
    if params.greedy:
        best = target_logits.argmax(dim=-1).tolist()
        for i, d in enumerate(drafts):
            if best[i] != d:
                return best[: i + 1], i
        return best, k
    rows = k + 1
    p = filtered_probs(target_logits, [params.temperature] * rows, [params.top_k] * rows, [params.top_p] * rows,
                       [params.min_p] * rows)
    u = torch.rand(k, dtype=torch.float64, device="cpu", generator=generator).tolist()
    for i, d in enumerate(drafts):
        q_d = 1.0 if draft_probs is None else float(draft_probs[i, d])
        if q_d > 0 and u[i] * q_d <= float(p[i, d]):
            continue
        if draft_probs is None:
            residual = p[i].clone()
            residual[d] = 0.0
        else:
            residual = (p[i] - draft_probs[i]).clamp_min(0.0)
        if float(residual.sum()) <= 0.0:
            residual = p[i]
        recovered = int(draw(residual[None], [generator])[0])
        return [*drafts[:i], recovered], i
    bonus = int(draw(p[k][None], [generator])[0])
    return [*drafts, bonus], k
