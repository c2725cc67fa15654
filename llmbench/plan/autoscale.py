"""Provisioning policies played over a day: replicas, GPU-hours, dollars and SLO attainment.

Each replica serves `capacity` req/s within the SLO (measured by a sweep, or simulated). The load is a fluid:
in each step, arrivals beyond the ready replicas' capacity either wait in a queue that drains when capacity
returns (`overload="queue"`: a request whose wait exceeds the TTFT budget misses the SLO) or are refused
(`"shed"`: each one misses it). Replicas an autoscaler asks for become ready `scale_up_delay` seconds later
(and are paid for from the moment they are asked for); it drops replicas once fewer have been enough for
`cooldown` seconds. Static peak provisioning holds the busiest window's replicas all day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Policy:
    name: str  # static-peak, autoscale
    scale_up_delay: float = 300.0
    cooldown: float = 600.0
    target_utilization: float = 0.7
    min_replicas: int = 1


@dataclass
class Outcome:
    policy: Policy
    ready: np.ndarray  # ready replicas per step
    billed: np.ndarray  # ready plus those being provisioned
    good: np.ndarray  # requests within the SLO, per step
    arrived: np.ndarray

    @property
    def attainment(self) -> float:
        total = float(self.arrived.sum())
        return float(self.good.sum()) / total if total else 1.0

    def per_window(self, window_steps: int) -> np.ndarray:
        """Attainment per window of `window_steps` steps (1.0 where nothing arrived)."""
        n = math.ceil(len(self.good) / window_steps)
        good, arrived = (np.add.reduceat(x, np.arange(0, n * window_steps, window_steps)[:n])
                         for x in (self.good, self.arrived))
        return np.where(arrived > 0, good / np.maximum(arrived, 1e-12), 1.0)


def needed(rate: np.ndarray, capacity: float, headroom: float, floor: int = 1) -> np.ndarray:
    """Replicas that serve `rate` within the SLO with `headroom` for bursts."""
    return np.maximum(np.ceil(rate * (1 + headroom) / capacity - 1e-9), floor).astype(int)


def play(policy: Policy, rates: np.ndarray, step_s: float, capacity: float, headroom: float,
         ttft_budget_s: float, overload: str = "queue", window_steps: int = 1) -> Outcome:
    """One policy over the day, step by step (a fluid queue, so a day of steps takes milliseconds)."""
    n = len(rates)
    if policy.name == "static-peak":
        starts = np.arange(0, n, window_steps)
        per_window = np.add.reduceat(rates, starts) / np.diff(np.append(starts, n))  # each window's mean rate
        peak = int(needed(per_window, capacity, headroom, policy.min_replicas).max())
        ready = np.full(n, peak)
        billed = ready.copy()
    else:
        ready, billed = _autoscale(policy, rates, step_s, capacity)
    arrived = rates * step_s
    serve = ready * capacity * step_s
    if overload == "shed":
        return Outcome(policy, ready, billed, np.minimum(arrived, serve), arrived)
    good, queue = np.zeros(n), 0.0
    for i in range(n):
        wait = queue / (ready[i] * capacity) if ready[i] else math.inf
        queue = max(queue + arrived[i] - serve[i], 0.0)
        good[i] = arrived[i] if wait <= ttft_budget_s else 0.0
    return Outcome(policy, ready, billed, good, arrived)


def _autoscale(policy: Policy, rates: np.ndarray, step_s: float, capacity: float) -> tuple[np.ndarray, np.ndarray]:
    """Target tracking on the offered rate: desired = rate / (target utilization x capacity)."""
    n = len(rates)
    desired = np.maximum(np.ceil(rates / (policy.target_utilization * capacity) - 1e-9),
                         policy.min_replicas).astype(int)
    delay = max(int(round(policy.scale_up_delay / step_s)), 0)
    cool = max(int(round(policy.cooldown / step_s)), 1)
    ready, billed = np.zeros(n, int), np.zeros(n, int)
    current = int(desired[0])  # the day starts provisioned for its first step
    pending: list[tuple[int, int]] = []  # (ready at step, count)
    enough_since = None
    for i in range(n):
        current += sum(count for at, count in pending if at == i)
        pending = [(at, count) for at, count in pending if at > i]
        coming = sum(count for _, count in pending)
        if desired[i] > current + coming:
            pending.append((i + delay, int(desired[i] - current - coming)))
            if delay == 0:
                current += pending.pop()[1]
        if desired[i] < current and not pending:
            enough_since = i if enough_since is None else enough_since
            if i - enough_since >= cool:
                current, enough_since = int(desired[i]), None
        else:
            enough_since = None
        ready[i] = current
        billed[i] = current + sum(count for _, count in pending)
    return ready, billed


def summary(outcome: Outcome, step_s: float, gpus_per_replica: int, price_per_gpu_hour: float | None) -> dict:
    gpu_hours = float(outcome.billed.sum()) * gpus_per_replica * step_s / 3600.0
    hours = len(outcome.billed) * step_s / 3600.0
    return {"name": outcome.policy.name, "gpu_hours": gpu_hours,
            "cost_per_day": gpu_hours * price_per_gpu_hour * 24.0 / hours if price_per_gpu_hour is not None and hours
            else None,
            "cost": gpu_hours * price_per_gpu_hour if price_per_gpu_hour is not None else None,
            "attainment": outcome.attainment, "peak_replicas": int(outcome.ready.max()),
            "mean_replicas": float(outcome.ready.mean()),
            "scale_up_delay_s": outcome.policy.scale_up_delay if outcome.policy.name != "static-peak" else None}
