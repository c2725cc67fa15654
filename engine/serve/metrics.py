"""Prometheus metrics named as vLLM names them, so dashboards and scrapers work unchanged."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.llm import LLM, RequestOutput

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class EngineMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(model_name)

        def histogram(name: str, doc: str, buckets=LATENCY_BUCKETS) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.model_name = model_name
        self.running = gauge("vllm:num_requests_running", "Requests in the running batch")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1)")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache")
        self.preemptions = counter("vllm:num_preemptions", "Sequences preempted (recompute)")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens computed")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated")
        self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Sequences given speculative guesses")
        self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Speculative tokens proposed")
        self.spec_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Speculative tokens accepted")
        self._success = Counter("vllm:request_success", "Finished requests", labels + ["finished_reason"],
                                registry=r)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token")
        self.itl = histogram("vllm:inter_token_latency_seconds", "Time between tokens of a request")
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Arrival to finish")
        self.queue = histogram("vllm:request_queue_time_seconds", "Arrival to first scheduling")
        self.iteration_tokens = histogram("vllm:iteration_tokens_total", "Tokens per engine step", TOKEN_BUCKETS)
        self._last_token: dict[str, float] = {}
        self._lock = threading.Lock()

    def on_step(self, llm: LLM, outputs: list[RequestOutput]) -> None:
        """Called by the engine thread after every step."""
        step = llm.stats.steps[-1]
        self.running.set(step.num_running)
        self.waiting.set(step.num_waiting)
        self.kv_usage.set(step.kv_usage)
        self.prefix_queries.inc(step.prefix_queried_tokens)
        self.prefix_hits.inc(step.prefix_hit_tokens)
        self.preemptions.inc(step.num_preemptions)
        self.prompt_tokens.inc(step.num_prefill_tokens)
        self.generation_tokens.inc(step.num_generated_tokens)
        self.spec_drafts.inc(step.num_drafts)
        self.spec_draft_tokens.inc(step.num_draft_tokens)
        self.spec_accepted_tokens.inc(step.num_accepted_tokens)
        self.iteration_tokens.observe(step.num_prefill_tokens + step.num_decode_tokens)
        with self._lock:
            for out in outputs:
                self._observe(out, step.time)

    def idle(self, llm: LLM) -> None:
        usage = llm.block_manager.usage()
        self.running.set(len(llm.scheduler.running))
        self.waiting.set(len(llm.scheduler.waiting))
        self.kv_usage.set(usage.usage)

    def _observe(self, out: RequestOutput, now: float) -> None:
        rid = out.request_id
        last = self._last_token.get(rid)
        if last is None and out.first_token_time is not None:
            self.ttft.observe(out.first_token_time - out.arrival_time)
            if out.queue_time is not None:
                self.queue.observe(out.queue_time)
        elif last is not None:
            self.itl.observe(now - last)
        self._last_token[rid] = now
        if out.finished:
            self._last_token.pop(rid, None)
            self.e2e.observe((out.finish_time or now) - out.arrival_time)
            reason = out.outputs[0].finish_reason or "abort"
            self._success.labels(self.model_name, reason).inc()

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._last_token.pop(request_id, None)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
