"""`llmbench plan --timeline WINDOW`: the planner's per-replica capacity (measured or simulated, per candidate
GPU) played over a day of traffic; the cheapest fleet and its policies in plan.json and on the console."""

from __future__ import annotations

import dataclasses

import click

from llmbench import cli_options

FLAGS = [
    click.option("--timeline", metavar="WINDOW",
                 help="Plan a day window by window (e.g. 5m) over a trace or --dataset rate-profile: replicas per "
                      "window and provisioning policies compared (GPU-hours, $, SLO attainment)."),
    click.option("--scale-up-delay", default="5m", show_default=True,
                 help="--timeline: time from asking for a replica to its serving (provisioning, load, warm-up)."),
    click.option("--cooldown", default="10m", show_default=True,
                 help="--timeline: how long fewer replicas must suffice before the autoscaler drops some."),
    click.option("--target-utilization", default=0.7, show_default=True, type=click.FloatRange(0.05, 1.0),
                 help="--timeline: the autoscaler keeps the offered rate at this share of its capacity."),
    click.option("--min-replicas", default=1, show_default=True, type=click.IntRange(0),
                 help="--timeline: the fleet's floor."),
    click.option("--overload", default="queue", show_default=True, type=click.Choice(["queue", "shed"]),
                 help="--timeline: requests beyond capacity wait in a queue, or are refused."),
]
DELAYS = (0.0, 60.0, 300.0, 900.0)


def day_workload(o: dict, the_day):
    """The simulator's lengths: the trace's own, else the workload flags (ShareGPT by default)."""
    import numpy as np

    from llmbench.plan.workload import Workload, from_dataset

    if the_day.prompts is not None and the_day.outputs is not None and len(the_day.prompts):
        rng = np.random.default_rng(o["seed"])
        idx = rng.choice(len(the_day.prompts), min(len(the_day.prompts), 2000), replace=False)
        return Workload(np.maximum(the_day.prompts[idx], 1), np.maximum(the_day.outputs[idx], 1),
                        f"{the_day.source}: its own lengths ({len(idx):,} sampled)")
    name = "random" if o["input_len"] else "sharegpt"
    options = {k: o[k] for k in ("input_len", "output_len") if o[k]} if name == "random" else {}
    return from_dataset(name, options, o["num_prompts"] or 1000, o["tokenizer"], o["seed"])


def plan_timeline(o: dict, request, make_plan) -> dict:
    """One plan per candidate GPU (`--gpu A,B`), each with its day; the cheapest autoscaled fleet answers."""
    from llmbench.plan import autoscale
    from llmbench.plan.day import load, parse_duration

    try:
        window = parse_duration(o["timeline"])
        delay, cooldown = parse_duration(o["scale_up_delay"]), parse_duration(o["cooldown"])
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--timeline/--scale-up-delay/--cooldown") from None
    o["dataset"] = cli_options.dataset_choice(o)
    the_day = load(o["dataset"], cli_options.dataset_options(o), window)
    policy = autoscale.Policy("autoscale", delay, cooldown, o["target_utilization"], o["min_replicas"])
    peak = float(the_day.windows(window)[1].max())
    work = request.workload if request.results else day_workload(o, the_day)
    candidates = []
    for gpu in [g.strip() for g in (o["gpu"] or "").split(",")] or [None]:
        first = _day_for(o, request, make_plan, the_day, window, policy, peak, work, gpu, request.gpus_per_replica)
        choices = [first]
        if not request.gpus_per_replica:  # TP choices: each larger TP a replica of its own size and speed
            for tp in (2, 4, 8):
                if tp > first["tp"]:
                    plan = _day_for(o, dataclasses.replace(request, disaggregated=False), make_plan, the_day, window,
                                    policy, peak, work, gpu, tp)
                    if plan is not None:
                        choices.append(plan)
        key = "cost" if all(p["policies"][1]["cost"] is not None for p in choices) else "gpu_hours"
        chosen = min(choices, key=lambda p: p["policies"][1][key])
        for name in ("disaggregated", "disaggregated_day", "colocated_best_day"):
            if name in first:
                chosen[name] = first[name]
        chosen["tp_choices"] = [{"tp": p["tp"], **{k: p["policies"][1][k] for k in ("gpu_hours", "cost_per_day",
                                                                                    "attainment")}} for p in choices]
        candidates.append(chosen)
    by_cost = all(p["policies"][1]["cost"] is not None for p in candidates)
    key = "cost" if by_cost else "gpu_hours"
    best = min(candidates, key=lambda p: p["policies"][1][key])
    if not by_cost:
        best["estimates"].append("a candidate GPU has no catalog price (pass --price): fleets compared by GPU-hours")
    if len(candidates) > 1 and work is not None:
        best["fleet_mix"] = gpu_mix(o, request, make_plan, the_day, work, policy, window,
                                    best["policies"][1][key], key)
    pooled = [p for p in candidates if "disaggregated_day" in p]
    if len(candidates) > 1 or pooled:
        keys = ("gpu_hours", "cost_per_day", "attainment", "peak_replicas")
        best["fleet"] = [{"gpu": p["gpu"], "tp": p["tp"], **{k: p["policies"][1][k] for k in keys},
                          "static_peak_cost_per_day": p["policies"][0]["cost_per_day"]} for p in candidates]
        for p in pooled:
            tp = (p["disaggregated"].get("colocated_tp") or p["disaggregated"].get("gpus_per_replica"))
            best["fleet"] += [{"gpu": f"{p['gpu'] or 'the GPU'} colocated at TP{tp}",
                               **{k: p["colocated_best_day"][k] for k in keys}},
                              {"gpu": f"{p['gpu'] or 'the GPU'} as prefill/decode pools",
                               **{k: p["disaggregated_day"][k] for k in keys}}]
        cheapest = min(best["fleet"], key=lambda row: row["cost_per_day"] if by_cost else row["gpu_hours"])
        if "prefill/decode" in cheapest["gpu"]:
            best["estimates"].append(f"cheapest over the day: {cheapest['gpu']} ({cheapest['gpu_hours']:,.1f} "
                                     "GPU-hours), below the colocated fleet")
    auto, static = best["policies"][1], best["policies"][0]
    mix = best.get("fleet_mix") or {}
    mixed = f"; a mix by request size is cheaper: {mix['text']}" if mix.get("cheaper_than_best_single") else ""
    pools, colocated = best.get("disaggregated_day"), best.get("colocated_best_day")
    if pools and colocated:
        mixed += (f"; as prefill/decode pools: {pools['gpu_hours']:.1f} GPU-hours, attainment "
                  f"{pools['attainment']:.1%} (colocated at the same TP search: {colocated['gpu_hours']:.1f})")
    best["answer"] = (f"over {the_day.hours:.1f} h of {the_day.source}: autoscaled {auto['gpu_hours']:.1f} GPU-hours"
                      + (f" (${auto['cost']:,.0f})" if auto["cost"] is not None else "")
                      + f", SLO attainment {auto['attainment']:.1%}, peak {auto['peak_replicas']} replicas"
                      + (f" of {best['gpu']}" if best["gpu"] else "") + f" at TP{best['tp']}"
                      + f"; static peak {static['gpu_hours']:.1f} GPU-hours ({static['peak_replicas']} replicas, "
                        f"attainment {static['attainment']:.1%})" + mixed)
    return best


def queue_budget(slo, plans: list[dict]) -> float:
    """Seconds a request may wait in the queue within its TTFT bound: the bound less the P99 TTFT the plans give
    at capacity (the slowest of them); 1 s without a TTFT bound."""
    if not slo.ttft_ms:
        return 1.0
    p99 = max((f["value"] for p in plans for f in p["figures"] if f["name"] == "P99 TTFT"), default=0.0)
    return max((slo.ttft_ms - p99) / 1000, 0.0)


def _day_for(o: dict, request, make_plan, the_day, window: float, policy, peak: float, work, gpu: str | None,
             tp: int | None) -> dict | None:
    """The plan for one GPU type at one TP (None: the smallest that fits), with its day played; None where that
    TP cannot hold the model or meet the SLO."""
    from llmbench.plan import bands
    from llmbench.plan.planner import PlanError
    from llmbench.plan.timeline import plan_day

    try:
        plan = make_plan(dataclasses.replace(request, gpu=gpu or None, qps=max(peak, 1e-6), workload=work,
                                             gpus_per_replica=tp))
    except PlanError:
        if tp is None or tp == request.gpus_per_replica:
            raise
        return None
    layer = plan.get("measured") or plan.get("simulated") or {}
    if not layer.get("per_replica_rate"):
        raise click.ClickException(f"no per-replica capacity under the SLO to plan the day with ({gpu})")
    band = 0.0 if plan.get("measured") else bands.width(plan["setup"]["bands"].get("throughput", 0.0))
    budget = queue_budget(request.slo, [plan])
    price = (plan.get("cost") or {}).get("usd_per_gpu_hour")
    plan |= plan_day(the_day, window, layer["per_replica_rate"], band, layer.get("gpus_per_replica") or 1, price,
                     request.burst_headroom, budget, policy, o["overload"], DELAYS)
    plan["gpu"], plan["tp"] = gpu, layer.get("gpus_per_replica") or 1
    split = plan.get("disaggregated") or {}
    if split.get("disaggregated_per_gpu"):  # the same day on prefill/decode pools, and colocated at the same
        for key, per_gpu in (("disaggregated_day", split["disaggregated_per_gpu"]),  # best-TP search, per GPU
                             ("colocated_best_day", split["colocated_per_gpu"])):
            played = plan_day(the_day, window, per_gpu, band, 1, price, request.burst_headroom, budget, policy,
                              o["overload"])
            plan[key] = played["policies"][1]
    return plan


BUCKETS = 3


def gpu_mix(o: dict, request, make_plan, the_day, work, policy, window: float, best_single: float,
            key: str) -> dict:
    """Mélange's idea (arXiv 2404.14527): requests bucketed by size (terciles of prompt + output tokens), each
    bucket given to the GPU type with the lowest cost per request for it (price x GPUs per replica / the
    replica's capacity for that bucket: the ILP's fractional optimum), the buckets of one type pooled (a replica
    then serves their blend, at the harmonic capacity), each pool autoscaled over its share of the day. Kept
    only when cheaper than the best single type, so the fleet asked for is never dearer."""
    import numpy as np

    from llmbench.plan import autoscale
    from llmbench.plan.workload import Workload

    sizes = work.prompts + work.outputs
    edges = np.quantile(sizes, np.linspace(0, 1, BUCKETS + 1))
    edges[-1] += 1
    per = max(int(round(window / the_day.step_s)), 1)
    gpus = [g.strip() for g in o["gpu"].split(",")]
    buckets, setups = [], {}
    for b in range(BUCKETS):
        idx = np.flatnonzero((sizes >= edges[b]) & (sizes < edges[b + 1]))
        if not len(idx):
            continue
        sub = Workload(work.prompts[idx], work.outputs[idx], f"{work.source}, size bucket {b + 1}")
        rates = {}
        for gpu in gpus:
            plan = make_plan(dataclasses.replace(request, gpu=gpu, qps=None, workload=sub))
            layer = plan.get("measured") or plan.get("simulated") or {}
            if layer.get("per_replica_rate"):
                rates[gpu] = layer["per_replica_rate"]
                setups.setdefault(gpu, {"tp": layer.get("gpus_per_replica") or 1, "plans": [],
                                        "price": (plan.get("cost") or {}).get("usd_per_gpu_hour")})["plans"].append(plan)
        if not rates:
            continue

        def per_request(gpu: str, rates=rates) -> float:
            unit = setups[gpu]["price"] if key == "cost" else 1.0
            return unit * setups[gpu]["tp"] / rates[gpu]

        pick = min(rates, key=per_request)
        buckets.append({"tokens": [int(edges[b]), int(edges[b + 1]) - (b == BUCKETS - 1)],
                        "share": len(idx) / len(sizes), "gpu": pick, "per_replica_rate": rates[pick]})
    pools = []
    for gpu in dict.fromkeys(b["gpu"] for b in buckets):
        mine = [b for b in buckets if b["gpu"] == gpu]
        share = sum(b["share"] for b in mine)
        capacity = share / sum(b["share"] / b["per_replica_rate"] for b in mine)
        budget = queue_budget(request.slo, setups[gpu]["plans"])
        played = autoscale.play(policy, the_day.rates * share, the_day.step_s, capacity, request.burst_headroom,
                                budget, o["overload"], per)
        pools.append({"gpu": gpu, "share": share, "per_replica_rate": capacity, "good": float(played.good.sum()),
                      "arrived": float(played.arrived.sum()),
                      **autoscale.summary(played, the_day.step_s, setups[gpu]["tp"], setups[gpu]["price"])})
    total = sum(p[key] for p in pools if p[key] is not None)
    arrived = sum(p["arrived"] for p in pools)
    text = ", ".join(f"{b['gpu']} for {b['tokens'][0]}-{b['tokens'][1]} tokens ({b['share']:.0%})" for b in buckets)
    return {"buckets": buckets, "pools": pools, "gpu_hours": sum(p["gpu_hours"] for p in pools),
            "cost": total if key == "cost" else None,
            "attainment": sum(p["good"] for p in pools) / arrived if arrived else 1.0,
            "cheaper_than_best_single": bool(pools) and len(pools) > 1 and total < best_single, "text": text}


def print_timeline(plan: dict) -> None:
    from rich.table import Table

    from llmbench.live import terminal

    console = terminal()
    table = Table(title=f"policies over the day — {plan['day']['source']}")
    for col in ("policy", "GPU-hours", "$ per day", "SLO attainment", "peak replicas"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for p in plan["policies"]:
        table.add_row(p["name"], f"{p['gpu_hours']:,.1f}", "-" if p["cost_per_day"] is None else
                      f"{p['cost_per_day']:,.0f}", f"{p['attainment']:.2%}", str(p["peak_replicas"]))
    console.print(table)
    for row in plan.get("fleet", []):
        tp = f" TP{row['tp']}" if row.get("tp") else ""
        console.print(f"fleet candidate {row['gpu']}{tp}: {row['gpu_hours']:,.1f} GPU-hours, "
                      + ("-" if row["cost_per_day"] is None else f"${row['cost_per_day']:,.0f}/day")
                      + f", attainment {row['attainment']:.1%}", highlight=False)
    mix = plan.get("fleet_mix")
    if mix:
        verdict = "cheaper than the best single type" if mix["cheaper_than_best_single"] else \
            "not cheaper than the best single type: one pool wins"
        console.print(f"fleet mix by request size ({mix['text']}): {mix['gpu_hours']:,.1f} GPU-hours"
                      + ("" if mix["cost"] is None else f", ${mix['cost']:,.0f} over the day")
                      + f", attainment {mix['attainment']:.1%} — {verdict}", highlight=False)
