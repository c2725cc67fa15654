"""Send schedules: absolute offsets from the start, precomputed so sleep overshoot never accumulates."""

from __future__ import annotations

import math

import numpy as np


def schedule(num_requests: int, rate: float, burstiness: float = 1.0, seed: int = 0,
             duration: float | None = None) -> np.ndarray:
    """Offsets (seconds) of each send, as `vllm bench serve` draws them.

    rate inf: everything at 0. burstiness inf: constant gaps 1/rate. Otherwise gamma gaps with
    shape = burstiness and mean 1/rate (1 = Poisson, < 1 burstier), rescaled so the last send falls at
    N / rate. With `duration`, as many arrivals as fall inside it (num_requests is then ignored)."""
    if rate <= 0:
        raise ValueError(f"the request rate must be positive, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    if math.isinf(rate):
        if duration is not None:
            raise ValueError("a duration needs a finite rate")
        return np.zeros(num_requests)
    rng = np.random.default_rng(seed)
    if duration is not None:
        num_requests = max(int(rate * duration), 1)
    if math.isinf(burstiness):
        gaps = np.full(num_requests, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=num_requests)
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times *= (num_requests / rate) / times[-1]
    return times


def parse_rate(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not a rate: give a positive number or inf (a sweep also takes a..b "
                         "as in 5..50, a..b:step as in 5..50:5, or a list as in 5,10,20)") from None
    if value <= 0:
        raise ValueError(f"a rate must be positive, got {text}")
    return value


def parse_rates(text: str, points: int = 8) -> list[float]:
    """`a..b` (about `points` evenly spaced rates), `a..b:step`, or `5,10,20`."""
    text = text.strip()
    if ".." in text:
        span, _, step_text = text.partition(":")
        low_text, high_text = span.split("..", 1)
        low, high = parse_rate(low_text), parse_rate(high_text)
        if math.isinf(low) or math.isinf(high) or high < low:
            raise ValueError(f"bad rate range {text!r}: need finite a <= b")
        if step_text:
            step = float(step_text)
            if step <= 0:
                raise ValueError(f"bad step in {text!r}")
        else:
            step = nice_step((high - low) / max(points - 1, 1))
        count = int(math.floor((high - low) / step + 1e-9)) + 1
        rates = [round(low + i * step, 6) for i in range(count)]
        if rates[-1] < high - 1e-9:
            rates.append(high)
        return rates
    return [parse_rate(part) for part in text.split(",") if part.strip()]


def nice_step(raw: float) -> float:
    """The 1/2/2.5/5 x 10^k step closest to `raw` (so 5..50 gives 5, 10, ..., 50)."""
    if raw <= 0:
        return 1.0
    exp = math.floor(math.log10(raw))
    candidates = [m * 10**exp for m in (1, 2, 2.5, 5, 10)]
    return min(candidates, key=lambda c: abs(math.log(c / raw)))


def send_offsets(requests: list, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Each request's send time: the trace's own timestamps when every request has one (a replayed trace),
    otherwise the arrival process at `rate`."""
    if requests and all(r.timestamp is not None for r in requests):
        ts = np.asarray([r.timestamp for r in requests], dtype=float)
        return ts - ts.min()
    return schedule(len(requests), rate, burstiness, seed)
