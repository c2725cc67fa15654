"""Speculative decoding: a cheap proposer guesses k tokens, the target checks them in one forward.

Two proposers. `ngram` looks the guesses up in the request's own context. A draft model runs in the same
engine with its own KV pool that mirrors the target's block tables, so a block id means the same
positions in both pools and prefix-cached blocks are valid for both. The draft re-reads, at the start of
its next proposal, whatever the target computed that it did not (the step's prefill chunks, the last
accepted draft when all k were accepted); positions it wrote for rejected guesses lie beyond the
sequence and are overwritten later, exactly as in the target.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.loader import ModelConfig, read_config
from engine.model_runner import ModelRunner
from engine.sampler import apply_filters, draw
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence
from engine.spec.ngram import propose_ngram
from engine.step_inputs import Chunk

log = logging.getLogger(__name__)


@dataclass
class Proposal:
    tokens: list[int]
    probs: torch.Tensor | None  # [k, V] draft distributions; None for deterministic (one-hot) drafts


class Proposer:
    def __init__(self, config: EngineConfig, target: ModelRunner, target_cfg: ModelConfig, tokenizer,
                 max_model_len: int) -> None:
        self.config = config
        self.k = config.num_speculative_tokens
        self.max_model_len = max_model_len
        self.draft: ModelRunner | None = None
        if config.speculative_model != "ngram":
            folder = Path(config.speculative_model)
            draft_cfg = read_config(folder)
            check_same_vocab(folder, draft_cfg, target_cfg, tokenizer)
            self.draft = ModelRunner(config, draft_cfg, folder, max_model_len, num_blocks=target.num_blocks)
        log.info("speculative decoding: %s, k=%d", config.speculative_model, self.k)

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        if self.draft is not None:
            self.draft.copy_blocks(copies)

    def propose(self, batch: ScheduledBatch) -> dict[int, Proposal]:
        """Guesses for the batch's decoding sequences, keyed by their index in the batch."""
        limit = self.config.speculative_disable_by_batch_size
        wanted = {} if limit and len(batch.seqs) > limit else {
            i: self._budget(seq) for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens, strict=True))
            if seq.num_computed_tokens >= seq.num_prompt_tokens and n == seq.num_pending_tokens == 1
        }
        wanted = {i: k for i, k in wanted.items() if k > 0}
        if self.draft is None:
            c = self.config
            found = {i: propose_ngram(batch.seqs[i].token_ids, k, c.prompt_lookup_min, c.prompt_lookup_max)
                     for i, k in wanted.items()}
            return {i: Proposal(tokens, None) for i, tokens in found.items() if tokens}
        if not wanted:
            for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
                seq.draft_lag += n  # the draft catches up when speculation resumes
            return {}
        return self._run_draft(batch, wanted)

    def _budget(self, seq: Sequence) -> int:
        """k, cut so that no guess lies past max_tokens or max_model_len."""
        room = self.max_model_len - seq.num_tokens - 1
        if seq.params.max_tokens is not None:
            room = min(room, seq.params.max_tokens - seq.num_output_tokens - 1)
        return max(min(self.k, room), 0)

    def _run_draft(self, batch: ScheduledBatch, wanted: dict[int, int]) -> dict[int, Proposal]:
        chunks = []
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens, strict=True)):
            start = max(seq.num_computed_tokens - seq.draft_lag, 0)
            chunks.append(Chunk(seq.token_ids[start : seq.num_computed_tokens + n], start, seq.block_table,
                                int(i in wanted)))
            seq.draft_lag = 0
        order = sorted(wanted)
        tokens: dict[int, list[int]] = {i: [] for i in order}
        probs: dict[int, list[torch.Tensor]] = {i: [] for i in order}
        logits = self.draft.forward(chunks)
        for step in range(max(wanted.values())):
            for row, i in enumerate(order):
                token, q = _draw(logits[row], batch.seqs[i])
                tokens[i].append(token)
                probs[i].append(q)
            order = [i for i in order if len(tokens[i]) < wanted[i]]
            if not order:
                break
            logits = self.draft.forward([
                Chunk([tokens[i][-1]], batch.seqs[i].num_tokens + step, batch.seqs[i].block_table, 1)
                for i in order])
        return {i: Proposal(tokens[i], None if batch.seqs[i].params.greedy else torch.stack(probs[i]))
                for i in wanted}

    def accepted(self, seq: Sequence, proposal: Proposal, num_accepted: int) -> None:
        """The draft wrote K/V for the sequence's last token and the first k-1 guesses; when all k were
        accepted the target holds one token more than the draft."""
        if self.draft is not None:
            seq.draft_lag = int(num_accepted == len(proposal.tokens))


def _draw(logits: torch.Tensor, seq: Sequence) -> tuple[int, torch.Tensor | None]:
    p = seq.params
    if p.greedy:
        return int(logits.argmax()), None
    q = apply_filters(logits, p.temperature, p.top_k, p.top_p, p.min_p)
    return int(draw(q[None], [seq.generator])[0]), q


def check_same_vocab(folder: Path, draft_cfg: ModelConfig, target_cfg: ModelConfig, tokenizer) -> None:
    from transformers import AutoTokenizer

    if draft_cfg.vocab_size != target_cfg.vocab_size:
        raise ValueError(f"speculative model {folder}: vocab_size {draft_cfg.vocab_size} differs from the "
                         f"target's {target_cfg.vocab_size}; the draft must share the target's tokenizer")
    try:
        draft_vocab = AutoTokenizer.from_pretrained(str(folder)).get_vocab()
    except (OSError, ValueError) as err:
        raise ValueError(f"speculative model {folder}: no usable tokenizer ({err})") from None
    target_vocab = tokenizer.get_vocab()
    if draft_vocab != target_vocab:
        differ = sum(1 for t, i in draft_vocab.items() if target_vocab.get(t) != i)
        raise ValueError(f"speculative model {folder}: its tokenizer maps {differ} tokens differently from the "
                         "target's; the draft must share the target's tokenizer")
