"""Rates -> runs, stopping once the server is saturated."""

from __future__ import annotations

FAILURE_LIMIT = 0.05  # fraction of failed requests that ends a sweep
THROUGHPUT_GAIN = 1.05  # below this gain over the best earlier rate, throughput has stopped growing
TTFT_CLIMB = 2.0  # ...while P99 TTFT at least doubled: queueing has taken over


def saturation(history: list[dict], current: dict) -> str | None:
    """Why the sweep should stop after `current`, or None to go on."""
    total = current["completed"] + current["failed"]
    if total and current["failed"] / total > FAILURE_LIMIT:
        return f"{current['failed']} of {total} requests failed"
    if history:
        best = max(h["output_throughput"] for h in history)
        prev_ttft = history[-1]["p99_ttft_ms"]
        if current["output_throughput"] < THROUGHPUT_GAIN * best and prev_ttft > 0 and \
                current["p99_ttft_ms"] > TTFT_CLIMB * prev_ttft:
            return (f"saturated: output throughput {current['output_throughput']:.0f} tok/s did not grow beyond "
                    f"{best:.0f} while P99 TTFT rose from {prev_ttft:.0f} to {current['p99_ttft_ms']:.0f} ms")
    return None
