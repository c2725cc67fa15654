"""Rates -> runs, stopping once the server is saturated."""

from __future__ import annotations

FAILURE_LIMIT = 0.05  # fraction of failed requests that ends a sweep
THROUGHPUT_GAIN = 1.05  # below this gain over the best earlier rate, throughput has stopped growing
TTFT_CLIMB = 2.0  # ...while P99 TTFT at least doubled: queueing has taken over
SERVED_FLOOR = 0.8  # steady completions per second below this fraction of the offered rate: the queue grows


def served(result: dict) -> float:
    steady = result.get("steady_completion_rate")
    return steady if steady is not None else result["request_throughput"]


def saturation(history: list[dict], current: dict) -> str | None:
    """Why the sweep should stop after `current`, or None to go on."""
    total = current["completed"] + current["failed"]
    if total and current["failed"] / total > FAILURE_LIMIT:
        return f"{current['failed']} of {total} requests failed"
    rate = current.get("request_rate")
    if history and isinstance(rate, int | float) and rate > 0 and \
            served(current) < SERVED_FLOOR * rate and served(history[-1]) < SERVED_FLOOR * history[-1]["request_rate"]:
        return (f"saturated: {served(current):.2f} req/s completed of {rate:g} offered "
                f"(and {served(history[-1]):.2f} of {history[-1]['request_rate']:g} before)")
    if history:
        best = max(h["output_throughput"] for h in history)
        prev_ttft = history[-1]["p99_ttft_ms"]
        if current["output_throughput"] < THROUGHPUT_GAIN * best and prev_ttft > 0 and \
                current["p99_ttft_ms"] > TTFT_CLIMB * prev_ttft:
            return (f"saturated: output throughput {current['output_throughput']:.0f} tok/s did not grow beyond "
                    f"{best:.0f} while P99 TTFT rose from {prev_ttft:.0f} to {current['p99_ttft_ms']:.0f} ms")
    return None
