"""`plan --timeline`: the day window by window (offered rate, replicas and GPUs needed, with the band) and the
provisioning policies compared on it (GPU-hours, dollars, SLO attainment with the autoscaler's lag played)."""

from __future__ import annotations

from llmbench.plan import autoscale
from llmbench.plan.day import Day


def plan_day(day: Day, window_s: float, capacity: float, band: float, gpus_per_replica: int,
             price_per_gpu_hour: float | None, headroom: float, ttft_budget_s: float, policy: autoscale.Policy,
             overload: str = "queue", delays: tuple[float, ...] = ()) -> dict:
    """`timeline` (per window) and `policies` (static peak; the autoscaler asked for; the same autoscaler at
    other provisioning delays, so the cost of its lag shows)."""
    per = max(int(round(window_s / day.step_s)), 1)
    starts, rates = day.windows(window_s)
    play = lambda p: autoscale.play(p, day.rates, day.step_s, capacity, headroom, ttft_budget_s, overload, per)  # noqa: E731
    scaled = play(policy)
    attained = scaled.per_window(per)
    low, high = capacity * (1 - band), capacity * (1 + band)
    timeline = []
    for i, (start, rate) in enumerate(zip(starts, rates, strict=True)):
        replicas = int(autoscale.needed(rate, capacity, headroom, policy.min_replicas))
        timeline.append({"start_s": float(start), "rate": float(rate), "replicas": replicas,
                         "gpus": replicas * gpus_per_replica,
                         "replicas_band": [int(autoscale.needed(rate, high, headroom, policy.min_replicas)),
                                           int(autoscale.needed(rate, max(low, 1e-9), headroom, policy.min_replicas))],
                         "autoscaled_replicas": int(scaled.ready[i * per: (i + 1) * per].max()),
                         "attainment": float(attained[i])})
    outcomes = [play(autoscale.Policy("static-peak", min_replicas=policy.min_replicas)), scaled]
    outcomes += [play(autoscale.Policy(f"autoscale, {d:g} s delay", d, policy.cooldown, policy.target_utilization,
                                       policy.min_replicas)) for d in delays if d != policy.scale_up_delay]
    policies = [autoscale.summary(o, day.step_s, gpus_per_replica, price_per_gpu_hour) for o in outcomes]
    return {"timeline": timeline, "policies": policies, "series": {
        "step_s": day.step_s, "rate": [float(x) for x in day.rates],
        **{o.policy.name: [int(x) for x in o.ready] for o in outcomes[:2]}},
        "day": {"window_s": window_s, "per_replica_rate": capacity, "band": band,
                  "gpus_per_replica": gpus_per_replica, "price_per_gpu_hour": price_per_gpu_hour,
                  "overload": overload, "ttft_budget_s": ttft_budget_s, "source": day.source,
                  "scale_up_delay_s": policy.scale_up_delay, "cooldown_s": policy.cooldown,
                  "target_utilization": policy.target_utilization, "min_replicas": policy.min_replicas}}
