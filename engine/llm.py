"""The engine's front door: `LLM.generate` for offline use, and the step interface the server drives."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine import sampler
from engine.block_manager import BlockManager
from engine.config import EngineConfig, SamplingParams
from engine.detokenizer import CONTEXT, DetokState, detokenize_step
from engine.loader import read_config
from engine.model_runner import ModelRunner
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.spec.proposer import Proposal, Proposer
from engine.spec.rejection_sampler import verify
from engine.stats import DeviceClock, StatsLog, StepStats


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    new_text: str  # produced by the latest step
    new_token_ids: list[int]
    finish_reason: str | None  # stop | length | abort
    stop_reason: str | int | None = None
    logprobs: list[dict[int, float]] | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None

    @property
    def queue_time(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time


@dataclass
class _Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence]
    detok: dict[int, DetokState] = field(default_factory=dict)
    shown_tokens: dict[int, int] = field(default_factory=dict)  # seq index -> output tokens already reported
    shown_chars: dict[int, int] = field(default_factory=dict)  # seq index -> characters of text already reported


class LLM:
    def __init__(self, model: str | Path | None = None, **config) -> None:
        self.config = EngineConfig(model=str(model) if model is not None else None, **config)
        folder = Path(self.config.model) if self.config.model else _bundled_model()
        self.model_path = folder
        self.model_config = read_config(folder)
        self.max_model_len = min(self.config.max_model_len or self.model_config.max_position_embeddings,
                                 self.model_config.max_position_embeddings)
        if self.model_config.sliding_window:
            self.max_model_len = min(self.max_model_len, self.model_config.sliding_window)
        if not self.config.enable_chunked_prefill:
            self.config.max_num_batched_tokens = max(self.config.max_num_batched_tokens, self.max_model_len)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.eos_token_ids = tuple(self.model_config.eos_token_ids) or (self.tokenizer.eos_token_id,)
        torch.manual_seed(self.config.seed)
        self.runner = ModelRunner(self.config, self.model_config, folder, self.max_model_len)
        capacity = self.runner.num_blocks * self.config.block_size
        if capacity < self.max_model_len:
            raise ValueError(
                f"the KV cache holds {capacity} tokens ({self.runner.num_blocks} blocks), fewer than "
                f"max_model_len={self.max_model_len}; raise kv_cache_memory or lower max_model_len"
            )
        contiguous = self.max_model_len if self.config.kv_layout == "contiguous" else None
        self.block_manager = BlockManager(self.runner.num_blocks, self.config.block_size,
                                          self.config.enable_prefix_caching, contiguous)
        self.scheduler = Scheduler(self.config, self.block_manager, self.max_model_len)
        self.spec = (Proposer(self.config, self.runner, self.model_config, self.tokenizer, self.max_model_len)
                     if self.config.speculative_model else None)
        self.requests: dict[str, _Request] = {}
        self.last_batch = None  # the batch of the step being run (a failed step's suspects)
        self.stats = StatsLog(self.config.stats_window)
        self.clock = DeviceClock(self.runner.device)

    # -- step interface ---------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None) -> None:
        params = params or SamplingParams()
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(ids)} tokens; max_model_len is {self.max_model_len}")
        vocab = self.model_config.vocab_size
        if any(not 0 <= t < vocab for t in ids) or any(t >= vocab for t in params.stop_token_ids):
            raise ValueError(f"token ids must be in [0, {vocab})")
        seq = Sequence(request_id, ids, params, arrival_time=arrival_time or time.time())
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        seq.pending_forks = params.n - 1
        self.requests[request_id] = _Request(request_id, ids, params, [seq])
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> bool:
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        for seq in req.seqs:
            if not seq.is_finished:
                self.scheduler.finish(seq)
                seq.finish_reason = "abort"
                seq.finish_time = time.time()
        return True

    def preempt_failed_batch(self) -> list[str]:
        """After a step raised: its requests go back to waiting, recomputed from their tokens, so the engine's
        state is consistent whatever the step had done; returns them (the suspects), oldest first."""
        batch, self.last_batch = self.last_batch, None
        self.block_manager.pending_copies.clear()
        seqs = batch.seqs if batch else [s for r in self.requests.values() for s in r.seqs]  # failed before scheduling
        suspects = list(dict.fromkeys(seq.request_id for seq in seqs))
        for rid in suspects:
            for seq in self.requests[rid].seqs if rid in self.requests else []:
                if seq in self.scheduler.running:
                    self.scheduler.preempt(seq)
        return suspects

    def step_alone(self, request_id: str, max_steps: int = 256) -> list[RequestOutput]:
        """Step with only `request_id` schedulable until it shows an output (a token, or its end); everything
        else waits its turn unchanged. A step that raises here raised for this request alone."""
        held = [seq for seq in self.scheduler.running if seq.request_id != request_id]
        for seq in held:
            self.scheduler.preempt(seq)
        waiting = self.scheduler.waiting
        others = [seq for seq in waiting if seq.request_id != request_id]
        for seq in others:
            waiting.remove(seq)
        outputs: list[RequestOutput] = []
        try:
            for _ in range(max_steps):
                step = self.step()
                outputs += step
                if not step and not self.has_unfinished() or any(o.request_id == request_id for o in step):
                    break
        finally:
            waiting.extend(others)
        return outputs

    def reset_prefix_cache(self) -> bool:
        """Drop the prefix cache; refused (False) while requests are unfinished."""
        return not self.has_unfinished() and self.block_manager.reset_prefix_cache()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    @torch.inference_mode()
    def step(self, finished_only: bool = False) -> list[RequestOutput]:
        """Schedule, run one forward, sample (or verify speculated tokens); return an output for every
        request that changed (`finished_only`: for every request that finished, as `generate` needs: building
        256 outputs a step it never reads cost 3 % of an offline run)."""
        t0 = time.perf_counter()
        batch = self.scheduler.schedule()
        self.last_batch = batch
        if not batch:
            return []
        proposals = {}
        if self.spec:
            self.spec.copy_blocks(batch.copies)  # before the draft writes into the copied blocks
            proposals = self.spec.propose(batch)
        self.clock.start()
        logits, sampled = self.runner.execute(batch, {i: p.tokens for i, p in proposals.items()})
        context = sum(s.num_computed_tokens + n for s, n in zip(batch.seqs, batch.num_tokens, strict=True))
        num_decode = sum(1 for seq, n in zip(batch.seqs, batch.num_tokens, strict=True)
                         if n == 1 and seq.num_computed_tokens >= seq.num_prompt_tokens)
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            seq.num_computed_tokens += n
            self.block_manager.register_computed(seq)
        plain, plain_rows, speculated, row = [], [], [], 0
        for i in sampled:
            width = 1 + len(proposals[i].tokens) if i in proposals else 1
            if i in proposals:
                speculated.append((batch.seqs[i], proposals[i], logits[row : row + width]))
            else:
                plain.append(batch.seqs[i])
                plain_rows.append(row)
            row += width
        now = time.time()
        changed: dict[str, _Request] = {}
        plain, plain_logits = self._fork(plain, logits[plain_rows] if speculated else logits)
        sampled_tokens = sampler.sample(plain_logits, plain, self.eos_token_ids)
        self.clock.stop()
        tokens = sampled_tokens.tolist()  # the step's one wait for the device
        logprobs = sampler.top_logprobs(plain_logits, tokens, plain)
        for seq, token, lp in zip(plain, tokens, logprobs, strict=True):
            if not seq.is_finished:
                self._append(seq, token, lp, now)
                changed[seq.request_id] = self.requests[seq.request_id]
        accepted = generated = 0
        for seq, proposal, rows in speculated:
            emitted, num_accepted = self._verify(seq, proposal, rows, now)
            accepted += num_accepted
            generated += emitted
            changed[seq.request_id] = self.requests[seq.request_id]
        self.stats.record(StepStats(
            time=now, step_seconds=time.perf_counter() - t0,
            num_prefill_tokens=batch.total_tokens - num_decode, num_decode_tokens=num_decode,
            num_running=len(self.scheduler.running), num_waiting=len(self.scheduler.waiting),
            kv_usage=self.block_manager.usage().usage, prefix_queried_tokens=batch.prefix_queried_tokens,
            prefix_hit_tokens=batch.prefix_hit_tokens, num_preemptions=batch.num_preempted,
            num_generated_tokens=len(tokens) + generated, num_seqs=len(batch.seqs), num_context_tokens=context,
            num_drafts=len(proposals), num_draft_tokens=sum(len(p.tokens) for p in proposals.values()),
            num_accepted_tokens=accepted, device_seconds=self.clock.seconds(),
        ))
        return [self._output(req) for req in changed.values() if not finished_only or self._finished(req)]

    @staticmethod
    def _finished(req: _Request) -> bool:
        return len(req.seqs) == req.params.n and all(s.is_finished for s in req.seqs)

    def _verify(self, seq: Sequence, proposal: Proposal, logits: torch.Tensor, now: float) -> tuple[int, int]:
        """Check one sequence's guesses against the target's k+1 rows; append what survives."""
        for ahead in range(len(logits)):
            banned = sampler.banned_tokens(seq, self.eos_token_ids, ahead)
            if banned:
                logits[ahead, banned] = float("-inf")
        tokens, num_accepted = verify(logits, proposal.tokens, proposal.probs, seq.params, seq.generator)
        logprobs = sampler.top_logprobs(logits[: len(tokens)], tokens, [seq] * len(tokens))
        emitted = 0
        for token, lp in zip(tokens, logprobs, strict=True):
            self._append(seq, token, lp, now)
            emitted += 1
            if seq.is_finished:
                return emitted, num_accepted
        seq.num_computed_tokens += emitted - 1
        self.block_manager.register_computed(seq)
        self.spec.accepted(seq, proposal, num_accepted)
        return emitted, num_accepted

    # -- offline API ------------------------------------------------------------------------------
    def generate(self, prompts: str | list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        ids = [f"gen-{time.monotonic_ns()}-{i}" for i in range(len(prompts))]
        for rid, prompt, p in zip(ids, prompts, params_list, strict=True):
            self.add_request(rid, prompt, p)
        final: dict[str, RequestOutput] = {}
        while self.has_unfinished():
            for out in self.step(finished_only=True):
                if out.finished:
                    final[out.request_id] = out
        return [final[rid] for rid in ids]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, verbose=False).input_ids  # too long is answered with a 400, not a warning

    # -- internals --------------------------------------------------------------------------------
    def _fork(self, seqs: list[Sequence], logits: torch.Tensor) -> tuple[list[Sequence], torch.Tensor]:
        """n > 1: at the first sampled token, fork siblings that share the prompt's blocks."""
        if not any(s.pending_forks for s in seqs):
            return seqs, logits
        out_seqs, rows = [], []
        for row, seq in enumerate(seqs):
            out_seqs.append(seq)
            rows.append(row)
            req = self.requests[seq.request_id]
            for index in range(1, seq.pending_forks + 1):
                child = seq.fork(index)
                self.block_manager.fork(seq, child)
                req.seqs.append(child)
                self.scheduler.running.append(child)
                out_seqs.append(child)
                rows.append(row)
            seq.pending_forks = 0
        return out_seqs, logits[rows]

    def _append(self, seq: Sequence, token: int, logprob: dict[int, float] | None, now: float) -> None:
        seq.token_ids.append(token)
        if logprob is not None:
            seq.logprobs.append(logprob)
        if seq.first_token_time is None:
            seq.first_token_time = now
        self.block_manager.update_hashes(seq)
        req = self.requests[seq.request_id]
        state = req.detok.setdefault(seq.index, DetokState(prefix_offset=max(seq.num_prompt_tokens - CONTEXT, 0),
                                                           read_offset=seq.num_prompt_tokens))
        before = len(state.text)
        detokenize_step(self.tokenizer, seq.token_ids, state)
        p = seq.params
        reason, stop = None, None
        if p.max_tokens is not None and seq.num_output_tokens >= p.max_tokens:
            reason = "length"
        if seq.num_tokens >= self.max_model_len:
            reason = "length"
        if seq.num_output_tokens > p.min_tokens or seq.num_output_tokens == p.min_tokens > 0:
            if token in p.stop_token_ids:
                reason, stop = "stop", token
            elif token in self.eos_token_ids and not p.ignore_eos:
                reason, stop = "stop", None
            elif p.stop:
                hit = _find_stop(state.text, p.stop, max(before - p.max_stop_len + 1, 0))
                if hit is not None:
                    state.text = state.text[: hit[0]]
                    reason, stop = "stop", hit[1]
        if reason:
            seq.finish_reason, seq.stop_reason, seq.finish_time = reason, stop, now
            self.scheduler.finish(seq)

    def _output(self, req: _Request) -> RequestOutput:
        outputs = []
        for seq in sorted(req.seqs, key=lambda s: s.index):
            state = req.detok.get(seq.index, DetokState())
            shown = req.shown_tokens.get(seq.index, 0)
            text_shown = req.shown_chars.get(seq.index, 0)
            outputs.append(CompletionOutput(
                index=seq.index, text=state.text, token_ids=seq.output_token_ids,
                new_text=state.text[text_shown:], new_token_ids=seq.output_token_ids[shown:],
                finish_reason=seq.finish_reason, stop_reason=seq.stop_reason,
                logprobs=seq.logprobs if seq.params.logprobs is not None else None,
            ))
            req.shown_tokens[seq.index] = seq.num_output_tokens
            req.shown_chars[seq.index] = len(state.text)
        seqs = req.seqs
        finished = self._finished(req)
        if finished:
            self.requests.pop(req.request_id, None)
        return RequestOutput(
            request_id=req.request_id, prompt_token_ids=req.prompt_token_ids, outputs=outputs, finished=finished,
            arrival_time=seqs[0].arrival_time, first_scheduled_time=seqs[0].first_scheduled_time,
            first_token_time=min((s.first_token_time for s in seqs if s.first_token_time), default=None),
            finish_time=max((s.finish_time for s in seqs if s.finish_time), default=None) if finished else None,
        )


def _find_stop(text: str, stops: list[str], start: int = 0) -> tuple[int, str] | None:
    """The earliest stop string in `text[start:]`: only the new tail can hold a stop not seen before (a stop
    that straddles the old text and the new piece starts at most max_stop_len - 1 characters back)."""
    hits = [(i, s) for s in stops if s and (i := text.find(s, start)) >= 0]
    return min(hits) if hits else None


def _bundled_model() -> Path:
    from bundled.modelbuild import DEFAULT_SIZE, build_model

    return build_model(DEFAULT_SIZE)
