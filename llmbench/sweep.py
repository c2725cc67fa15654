"""A sweep (or one run): the rates, the loop over them, and the transport that sends the load.

`SweepPlan` is built once from the command line (or a scenario); `run_sweep` resolves the target, builds
each rate's workload and schedule, runs it with the native asyncio client or Locust, writes the results
folder through `llmbench.results`, and stops once the server is saturated (`llmbench.saturation`). `llmbench run` is a sweep of one
rate that never stops early.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmbench import (
    __version__,
    arrivals,
    client_stalls,
    context_fit,
    datasets,
    metrics,
    prefix_reuse,
    results,
    saturation,
    steady_state,
)
from llmbench.datasets.text import count_tokens
from llmbench.locust_scrape import ServerWatch
from llmbench.runner import Progress, RunConfig, RunResult, execute, hold_interrupts, server_figures
from llmbench.slo import SLO, Capacity, capacity, rate_unit
from llmbench.target import Target, load_tokenizer, open_target, quantization_mode, reset_prefix_cache

DEFAULT_PROMPTS = 200  # requests per rate when neither --num-prompts nor a (finite-rate) --duration is given
MIN_WINDOW, MAX_WINDOW = 15.0, 180.0  # seconds of arrivals per rate when the sweep sizes them itself
PROBE_REQUESTS = 8  # sent at once before the first rate, to size the window to the server's latency
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 3, 130


@dataclass
class Workload:
    dataset: str = "sharegpt"
    options: dict = field(default_factory=dict)  # the dataset builder's own keywords
    num_prompts: int | None = None
    duration: float | None = None  # seconds of arrivals per rate (finite rates; wins over num_prompts)
    seed: int = 0
    ignore_eos: bool = False
    temperature: float | None = None
    backend: str = "openai"
    think_time: float = 0.0

    def count(self, rate: float) -> int:
        if self.duration is not None and math.isfinite(rate):
            return max(int(rate * self.duration), 1)
        return self.num_prompts or DEFAULT_PROMPTS


@dataclass
class SweepPlan:
    rates: list[float]
    out: Path
    workload: Workload = field(default_factory=Workload)
    base_url: str | None = None  # None: start the bundled engine for the duration
    model: str | None = None
    tokenizer: str | None = None
    api_key: str | None = None
    engine_flags: dict = field(default_factory=dict)
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 0
    request_timeout: float = 600.0
    read_timeout: float | None = 60.0
    percentiles: tuple[float, ...] = (50, 90, 95, 99)
    slo: SLO = field(default_factory=SLO)
    transport: str = "native"  # or "locust"
    workers: int = 2
    users: int | None = None  # Locust closed loop
    stop_when_saturated: bool = True
    max_failure_rate: float = 0.05
    reset_prefix_cache: bool = True  # before each rate, so no rate finds an earlier one's prompts cached
    auto_window: bool = False  # size each rate's --duration from the latency measured so far
    notes: list[str] = field(default_factory=list)  # said before anything starts (a tidied flag)
    overwrite: bool = False  # replace the results of labels the folder already has
    label_suffix: str = ""  # --append: this run's labels are `rate-N<suffix>`, beside the folder's own
    steady_state: bool = False  # also report the window without the ramp and the drain
    args: dict = field(default_factory=dict)  # the command line as given, for metadata.json


@dataclass
class SweepOutcome:
    rows: list[dict]
    sent: set[str] = field(default_factory=set)  # prompts sent so far, kept where the prefix cache cannot be reset
    stop_reason: str | None = None
    capacity: Capacity | None = None
    failure: str | None = None  # why the run counts as failed (target died, too many failures)
    interrupted: bool = False
    target_down_at: float | None = None  # the rate at which the target stopped answering

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.failure else EXIT_OK


class View:
    """What a sweep tells its user; the command line's live display implements it (this one stays quiet)."""

    def target(self, target: Target, description: str, notes: list[str]) -> None: ...

    def note(self, text: str) -> None: ...

    def rate_started(self, index: int, count: int, rate: float, requests: int) -> None: ...

    def progress(self, snapshot: Progress) -> None: ...

    def rate_done(self, row: dict) -> None: ...


def run_sweep(plan: SweepPlan, view: View | None = None) -> SweepOutcome:
    """Measure every rate of the plan (or until saturated, interrupted, or the target stops answering)."""
    view = view or View()
    outcome = SweepOutcome([])
    for text in plan.notes:
        view.note(text)
    log = plan.out / results.ENGINE_LOG if plan.base_url is None else None
    if plan.base_url is None:
        view.note(f"starting the bundled engine ({plan.model or 'its default model'}); its log: {log}")
    with results.claimed(plan.out), open_target(plan.base_url, plan.model, plan.engine_flags, log,
                                                plan.api_key) as target:
        if plan.overwrite:
            results.clear_labels(plan.out, [outcome_label(plan, r) for r in plan.rates])
        tokenizer, tokenizer_id, fallback = load_tokenizer(plan.tokenizer, target)
        notes = [f"no local tokenizer for {target.model!r}: lengths are counted with the bundled model's tokenizer "
                 "(pass --tokenizer DIR for exact lengths)"] if fallback else []
        config = (target.server_info.get("version") or {}).get("config")
        view.target(target, quantization_mode(config) if config else "", notes)
        try:
            if plan.auto_window:
                plan.workload.duration = MIN_WINDOW
                # where the cache cannot be reset, the first rate must not find the probe's prompts in it
                outcome.sent.update(_prompt_key(r) for r in _probe(plan, target, tokenizer, view))
            for index, rate in enumerate(plan.rates):
                if not _measure_rate(plan, target, tokenizer, tokenizer_id, index, rate, outcome, view, not fallback):
                    break
                if _too_short_to_trust(plan, outcome.rows[-1]):
                    view.note(f"measuring {rate:g} req/s again over {plan.workload.duration:g} s: it met the SLO, but "
                              "its window was too short to tell whether completions lagging arrivals "
                              f"({outcome.rows[-1]['kept_up']:.0%}) was the ramp or a backlog")
                    outcome.rows.pop()
                    results.clear_labels(plan.out, [outcome_label(plan, rate)])
                    if not _measure_rate(plan, target, tokenizer, tokenizer_id, index, rate, outcome, view,
                                         not fallback):
                        break
        except KeyboardInterrupt:  # between runs (a run itself ends cleanly on Ctrl-C, marked interrupted)
            outcome.interrupted = True
            hold_interrupts()
    changed = saturation.passed_backlogs(outcome.rows)
    if changed:
        try:
            for row in changed:
                results.write_result(results.RunFiles(plan.out, row["label"]), row)
            results.write_summary(plan.out, outcome.rows)
        except OSError as err:
            rates = ", ".join(f"{r['request_rate']:g}" for r in changed)
            view.note(f"could not rewrite {plan.out} ({err.strerror or err}): its files still call {rates} req/s "
                      "saturated")
    finite = [r for r in outcome.rows if isinstance(r["request_rate"], int | float) and r["completed"]
              and not r["interrupted"] and not r.get("target_down")]
    if finite:
        outcome.capacity = capacity([{"rate": float(r["request_rate"]), "attainment": r.get("slo_attainment") or 0.0,
                                      "saturated": bool(r["saturated"]), "kept_up": r.get("kept_up"),
                                      "client_stalled": bool(r.get("client_stall_moved_slo"))}
                                     for r in finite], plan.slo, rate_unit(finite))
    return outcome




def _prompt_key(request: datasets.Request) -> str:
    return request.prompt if request.prompt is not None else json.dumps(request.messages)


def _requests(workload: Workload, tokenizer, rate: float, sent: set[str]
              ) -> tuple[list, datasets.DatasetInfo, int]:
    """The rate's requests and how many of them an earlier rate sent: the seeded draw every rate sends, or, where
    the server's prefix cache cannot be dropped between rates (`sent`: the prompts earlier rates sent), the same
    draw made longer with those skipped (taken again only when the dataset runs out of others). A cached
    prompt flatters TTFT and, with no prefill among the decodes, TPOT too: on vLLM-CPU the same requests at the
    same rate, back to back (2.5 req/s, 150 ShareGPT requests), read TTFT P50/P99 77/392 ms and TPOT P50/P99
    20.1/37.3 ms sent first, 47/83 and 16.1/22.2 ms sent again."""
    count = workload.count(rate)
    requests, info = datasets.build(workload.dataset, tokenizer, count + len(sent), workload.seed,
                                    **workload.options)
    if not sent:
        return requests, info, 0
    seen = [_prompt_key(r) in sent for r in requests]
    unsent = [r for r, dup in zip(requests, seen, strict=True) if not dup]
    again = [r for r, dup in zip(requests, seen, strict=True) if dup]
    return (unsent + again)[:count], info, max(count - len(unsent), 0)


def _measure_rate(plan: SweepPlan, target: Target, tokenizer, tokenizer_id: str, index: int, rate: float,
                  outcome: SweepOutcome, view: View, exact_tokenizer: bool = True) -> bool:
    """One rate: workload, schedule, run, result files. False when the sweep must stop here. `exact_tokenizer`:
    the lengths are counted with the served model's own tokenizer."""
    why_not = reset_prefix_cache(target, plan.api_key) if plan.reset_prefix_cache else None
    fresh = why_not is not None and plan.workload.dataset in prefix_reuse.DRAWN  # a rate can draw unsent prompts
    requests, info, reused = _requests(plan.workload, tokenizer, rate, outcome.sent if fresh else set())
    too_long = context_fit.check(requests, target, exact_tokenizer, lambda text: count_tokens(tokenizer, text))
    if too_long:
        view.note(too_long)
    if fresh:
        outcome.sent.update(_prompt_key(r) for r in requests)
    if index == 0:
        try:
            results.write_metadata(plan.out, _metadata(plan, target, info, tokenizer_id))
        except OSError as err:
            raise ValueError(f"cannot write {plan.out} ({err.strerror or err}); nothing was measured") from None
        for text in info.notes:
            view.note(text)
    files = results.RunFiles(plan.out, outcome_label(plan, rate))
    if why_not and (not outcome.rows or outcome.rows[-1]["prefix_cache_reset"]):  # once, and when it stops working
        view.note(f"prefix cache not reset before each rate ({why_not}): " + (
            "each rate sends prompts no earlier rate sent (the same seeded draw, the ones already sent skipped), "
            "so none finds another's prompts cached (an earlier command's may be: the server's own count says)"
            if fresh else
            "a rate may find prompts an earlier one sent still cached, which flatters its TTFT"))
    if reused:
        view.note(f"{reused} of this rate's {len(requests)} prompts were sent by an earlier rate (the dataset holds "
                  "no more unsent ones): they may find their prefixes cached")
    view.rate_started(index, len(plan.rates), rate, len(requests))
    if plan.transport == "locust":
        run, extra = _locust(plan, target, rate, requests, tokenizer_id, files)
    else:
        offsets = arrivals.send_offsets(requests, rate, plan.burstiness, plan.workload.seed)
        run, extra = execute(_run_config(plan, target, rate), requests, offsets, files, view.progress), {}
    _honest_latency(plan, rate, run)
    if cached := prefix_reuse.note(run.metrics, plan.workload.dataset in prefix_reuse.DRAWN,
                                   plan.reset_prefix_cache and why_not is None):
        run.notes.append(cached)
    body = _result_body(plan, target, rate, run, info, tokenizer_id, extra)
    body["saturated"] = None if run.interrupted or run.target_down else saturation.verdict(body, plan.max_failure_rate)
    body["interrupted"] = run.interrupted
    body["target_down"] = run.target_down
    body["schedule"] = "trace" if requests and all(r.timestamp is not None for r in requests) else "rate"
    body["window_s"] = plan.workload.duration if math.isfinite(rate) else None
    body["prefix_cache_reset"] = plan.reset_prefix_cache and why_not is None
    body["fresh_prompts"] = fresh and not reused  # no prompt an earlier rate sent (the cache could not be reset)
    body["reused_prompts"] = reused
    try:
        row = results.write_result(files, body)
        results.write_summary(plan.out, [*outcome.rows, row])
    except OSError as err:
        row = {**body, "label": files.label}
        run.write_error = run.write_error or f"could not write {plan.out} ({err.strerror or err})"
    outcome.rows.append(row)
    view.rate_done(row)
    total = row["completed"] + row["failed"]
    if run.write_error:
        outcome.failure = (f"{run.write_error}: stopped after {rate:g} req/s; the figures shown were measured "
                           "but not all are saved — free space and run again (--overwrite)")
    elif run.interrupted:
        outcome.interrupted = True
    elif run.target_down:
        outcome.failure = next(n for n in run.notes if "stopped answering" in n)
        outcome.target_down_at = rate
    elif total and row["failed"] / total > plan.max_failure_rate:
        outcome.failure = (f"{row['failed']} of {total} requests failed at {rate:g} req/s (more than "
                           f"--max-failure-rate {plan.max_failure_rate:g})")
    elif saturation.twice(outcome.rows) and plan.stop_when_saturated and index + 1 < len(plan.rates):
        outcome.stop_reason = (f"stopping the sweep: saturated at {outcome.rows[-2]['request_rate']:g} and {rate:g} "
                               f"req/s; at {rate:g}: {row['saturated']}")
    elif saturation.past_the_knee_twice(outcome.rows, plan.slo.attainment) and plan.stop_when_saturated and \
            index + 1 < len(plan.rates):
        before = outcome.rows[-2]

        def share(r: dict, key: str) -> str:
            return "?" if r.get(key) is None else f"{r[key]:.0%}"

        outcome.stop_reason = (f"stopping the sweep: {before['request_rate']:g} and {rate:g} req/s both missed the SLO "
                               f"({share(before, 'slo_attainment')}, {share(row, 'slo_attainment')} of requests within "
                               f"it) while completions lagged arrivals (kept up {share(before, 'kept_up')}, "
                               f"{share(row, 'kept_up')})")
    if plan.auto_window and not row["saturated"] and row.get("median_e2el_ms"):
        _widen(plan, row["median_e2el_ms"] / 1000, f"the P50 E2E at {rate:g} req/s", view)
    return not (outcome.interrupted or outcome.failure or outcome.stop_reason)


def _honest_latency(plan: SweepPlan, rate: float, run: RunResult) -> None:
    """Latency from the scheduled send where there is a schedule (not at rate inf), else what sets a fixed
    concurrency's top TTFT percentile, and the steady state."""
    ok = [r for r in run.records if r.success and not r.warmup and not r.interrupted and r.chunk_times]
    if math.isfinite(rate) and not plan.users:
        figures, note = steady_state.scheduled_latencies(ok, plan.percentiles)
        run.metrics |= figures
    else:
        note = steady_state.opening_burst(ok, plan.max_concurrency or plan.users, plan.percentiles)
    if note:
        run.notes.append(note)
    if plan.steady_state:
        run.metrics["steady_state"] = steady_state.steady_state(run.records, plan.percentiles)


def outcome_label(plan: SweepPlan, rate: float) -> str:
    return results.label_for(rate, plan.max_concurrency, plan.users) + plan.label_suffix


def _too_short_to_trust(plan: SweepPlan, row: dict) -> bool:
    """A rate the answer could rest on (it met the SLO) whose window the ramp filled while completions lagged
    arrivals: a sweep that sizes its windows measures it again over the longer window its latency asks for."""
    return bool(plan.auto_window and row.get("window_short") and not row.get("saturated")
                and row.get("kept_up") is not None and row["kept_up"] < saturation.KEPT_UP
                and (row.get("slo_attainment") or 0.0) >= plan.slo.attainment
                and (row.get("window_s") or 0) < plan.workload.duration)


def _probe(plan: SweepPlan, target: Target, tokenizer, view: View) -> list[datasets.Request]:
    """A few requests at once before the first rate: how long the server takes per request, so the first
    window is long enough to see past the ramp (guidellm probes a synchronous rate first, for the same end).
    Returns the requests it sent."""
    requests, _ = datasets.build(plan.workload.dataset, tokenizer, PROBE_REQUESTS, plan.workload.seed,
                                 **plan.workload.options)
    cfg = _run_config(plan, target, math.inf)
    cfg.scrape, cfg.goodput = False, {}
    run = execute(cfg, requests, arrivals.send_offsets(requests, math.inf, 1.0, plan.workload.seed), None)
    if run.interrupted:
        raise KeyboardInterrupt
    e2e = [r.latency for r in run.records if r.success and r.latency is not None]
    if e2e:
        _widen(plan, float(sorted(e2e)[len(e2e) // 2]), f"the P50 E2E of {len(requests)} probe requests at once",
               view)
    return requests


def _widen(plan: SweepPlan, median_e2e: float, source: str, view: View) -> None:
    """Raise the window of the rates to come to WINDOW_E2E_MULTIPLE P50 E2Es (within MIN_WINDOW..MAX_WINDOW), never lower it."""
    window = min(max(metrics.window_for(median_e2e), MIN_WINDOW), MAX_WINDOW)
    if window > (plan.workload.duration or 0) + 0.5:
        plan.workload.duration = round(window)
        capped = " (capped; --duration goes longer)" if window >= MAX_WINDOW else ""
        view.note(f"{plan.workload.duration:g} s of arrivals per rate from here: {metrics.WINDOW_E2E_MULTIPLE:g}x "
                  f"{source} ({median_e2e:.2f} s)"
                  f"{capped}; --duration fixes the window")


def _run_config(plan: SweepPlan, target: Target, rate: float) -> RunConfig:
    w = plan.workload
    return RunConfig(base_url=target.base_url, model=target.model, backend=w.backend, rate=rate,
                     burstiness=plan.burstiness, max_concurrency=plan.max_concurrency, warmup=plan.warmup,
                     seed=w.seed, ignore_eos=w.ignore_eos, temperature=w.temperature,
                     request_timeout=plan.request_timeout, read_timeout=plan.read_timeout,
                     percentiles=plan.percentiles, goodput=plan.slo.bounds,
                     think_time=w.think_time, api_key=plan.api_key)


def _locust(plan: SweepPlan, target: Target, rate: float, requests: list, tokenizer_id: str,
            files: results.RunFiles) -> tuple[RunResult, dict]:
    from llmbench.locust_runner import run_locust

    w = plan.workload
    options = {"dataset": w.dataset, "num_prompts": len(requests), "rate": rate, "burstiness": plan.burstiness,
               "backend": w.backend, "seed": w.seed, "model": target.model, "tokenizer": tokenizer_id,
               "dataset_options": {k: v for k, v in w.options.items() if k != "path"},
               "dataset_path": w.options.get("path"), "ignore_eos": w.ignore_eos, "users": plan.users,
               "request_timeout": plan.request_timeout, "read_timeout": plan.read_timeout, "duration": w.duration}
    # the last send, then as long as a request may take: a burst queued for minutes is measured, not cut. A closed
    # loop stops sending itself, at --duration or when the requests run out (a safety limit only, then); a worker
    # without a user would never finish its share
    workers = min(plan.workers, plan.users) if plan.users else plan.workers
    last_send = (w.duration or len(requests) / plan.users * plan.request_timeout) if plan.users else \
        len(requests) / rate if math.isfinite(rate) else 0.0
    limit = last_send + plan.request_timeout + 10.0
    headers = {"Authorization": f"Bearer {plan.api_key}"} if plan.api_key else None
    with ServerWatch(target.base_url, files.engine_steps, headers) as watch:
        records, stalls, notes, interrupted = run_locust(target.base_url, options, workers, files, limit, plan.users)
    starts = [m["t0_wall"] for m in results.worker_metas(files.locust_dir)]
    points = watch.write(files.server_metrics, min(starts) if starts else None)
    result = metrics.compute(records, None, plan.percentiles, plan.slo.bounds, math.inf if plan.users else rate)
    figures, stall_note = client_stalls.summary(records, stalls, plan.percentiles, plan.slo.bounds)
    own, own_notes = server_figures(points, result | figures)
    result |= figures | own
    notes += ([stall_note] if stall_note else []) + own_notes + watch.notes
    notes.append(f"Locust transport: {workers} local worker(s)" + (f", {plan.users} users (closed loop)"
                                                                    if plan.users else ""))
    # a dead target shows as failed requests here (--max-failure-rate); a dead worker only loses its share
    return (RunResult(records, result, notes, points, False, interrupted),
            {"engine": "locust", "locust_workers": workers, "users": plan.users})


def _result_body(plan: SweepPlan, target: Target, rate: float, run: RunResult, info: datasets.DatasetInfo,
                 tokenizer_id: str, extra: dict) -> dict:
    """vLLM's `--save-result` keys, then llmbench's."""
    return {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": plan.workload.backend,
        "backend": plan.workload.backend,
        "model_id": target.model,
        "tokenizer_id": tokenizer_id,
        "request_rate": "inf" if math.isinf(rate) or plan.users else rate,
        "burstiness": plan.burstiness,
        "max_concurrency": plan.max_concurrency,
        **run.metrics,
        "dataset": info.name,
        "dataset_description": info.description,
        "ignore_eos": plan.workload.ignore_eos,
        "seed": plan.workload.seed,
        "notes": run.notes,
        "slo": plan.slo.bounds,
        "slo_attainment_target": plan.slo.attainment,
        "llmbench_version": __version__,
        **extra,
    }


def _metadata(plan: SweepPlan, target: Target, info: datasets.DatasetInfo, tokenizer_id: str) -> dict:
    return {"llmbench_version": __version__,
            "target": {"base_url": target.base_url, "model": target.model, "bundled": target.bundled,
                       **target.server_info},
            "dataset": asdict(info), "tokenizer": tokenizer_id,
            "slo": {**plan.slo.bounds, "attainment": plan.slo.attainment, "source": plan.slo.source},
            "args": {k: v for k, v in plan.args.items() if k != "api_key"}}
