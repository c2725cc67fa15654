"""Service-level objectives, one syntax everywhere, and the answer a sweep gives against them.

`ttft=500ms,tpot=50ms[,e2el=3s][,ttfo=5s]` (units ms or s, bare numbers are ms; ttfo: the first answer token,
after any reasoning); vLLM's `--goodput` spelling `ttft:500 tpot:50` is accepted too. A request is good when every stated bound holds, inclusively, as vLLM's
goodput counts it; a load level meets the SLO when at least `attainment` of its requests are good (0.99: the
P99s are within the bounds). The default is MLPerf's LLM server scenario (Llama-3.1-8B): P99 TTFT 2 s and
P99 TPOT 100 ms.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

KEYS = ("ttft", "tpot", "e2el", "ttfo")
MLPERF_SERVER = {"ttft": 2000.0, "tpot": 100.0}


class SLOError(ValueError):
    pass


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = MLPERF_SERVER["ttft"]
    tpot_ms: float | None = MLPERF_SERVER["tpot"]
    e2el_ms: float | None = None
    attainment: float = 0.99
    source: str = "MLPerf server defaults"
    ttfo_ms: float | None = None

    @property
    def bounds(self) -> dict[str, float]:
        return {k: v for k, v in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms),
                                  ("ttfo", self.ttfo_ms)) if v is not None}

    def describe(self) -> str:
        """`P99 TTFT <= 2 s and P99 TPOT <= 100 ms` (the percentile follows the attainment)."""
        pct = f"P{self.attainment * 100:g}"
        parts = [f"{pct} {k.upper()} <= {_ms_text(v)}" for k, v in self.bounds.items()]
        return " and ".join(parts) if parts else "no latency bound"

    def spec(self) -> str:
        return ",".join(f"{k}={v:g}ms" for k, v in self.bounds.items())


def _ms_text(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 and ms % 100 == 0 else f"{ms:g} ms"


_PART = re.compile(r"^\s*(ttft|tpot|e2el|ttfo)\s*[=:]\s*([0-9.]+)\s*(ms|s)?\s*$")


def parse_slo(text: str | list[str] | tuple[str, ...] | None, attainment: float = 0.99) -> SLO:
    """`ttft=500ms,tpot=50ms`, `ttft:500 tpot:50` or a list of such parts; None or empty: MLPerf's."""
    if isinstance(text, list | tuple):
        text = ",".join(text)
    if not text or not text.strip():
        return SLO(attainment=attainment)
    bounds: dict[str, float] = {}
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        match = _PART.match(part)
        if not match:
            raise SLOError(f"bad SLO {part!r}: use ttft=500ms,tpot=50ms[,e2el=3s][,ttfo=5s]")
        key, value, unit = match.groups()
        bounds[key] = float(value) * (1000.0 if unit == "s" else 1.0)
    return SLO(bounds.get("ttft"), bounds.get("tpot"), bounds.get("e2el"), attainment, "stated", bounds.get("ttfo"))


def good_mask(ttft_s: np.ndarray, tpot_s: np.ndarray, e2el_s: np.ndarray, success: np.ndarray, slo: SLO,
              ttfo_s: np.ndarray | None = None) -> np.ndarray:
    """Per request: succeeded and within every bound (a request of one token has no TPOT and passes it; a
    TTFO bound is checked against `ttfo_s`, as `RequestRecord.ttfo_bound` gives it)."""
    ok = np.asarray(success, dtype=bool).copy()
    ttfo_s = ttft_s if ttfo_s is None else ttfo_s
    for key, values, missing in (("ttft", ttft_s, np.inf), ("tpot", tpot_s, 0.0), ("e2el", e2el_s, np.inf),
                                 ("ttfo", ttfo_s, np.inf)):
        bound = slo.bounds.get(key)
        if bound is not None:
            v = np.asarray(values, dtype=float)
            ok &= np.where(np.isnan(v), missing, v) * 1000.0 <= bound
    return ok


@dataclass
class Capacity:
    """What a sweep says about one replica under the SLO."""

    rate: float | None  # req/s per replica meeting the SLO (interpolated), None when no rate met it
    note: str
    lowest_rate: float
    highest_rate: float
    passing: list[float]
    unit: str = "req/s"  # conversations/s where each arrival opens a multi-turn conversation

    def sentence(self, slo: SLO) -> str:
        if self.rate is None:
            return (f"no rate met the SLO ({slo.describe()}); the lowest rate measured was {self.lowest_rate:g} "
                    f"{self.unit}, try --rate {lower_rates(self.lowest_rate)}")
        return f"sustains {self.rate:.3g} {self.unit} per replica under {slo.describe()} ({self.note})"


def rate_unit(rows: list[dict]) -> str:
    """What the measured rates count: requests, or conversations where each paced arrival opens a multi-turn one
    (its later turns follow the replies, not the rate)."""
    return "conversations/s" if any(r.get("sessions") and r.get("schedule") == "rate" for r in rows) else "req/s"


def unpaced_sentence(rows: list[dict], slo: SLO) -> str | None:
    """The answer of a run that paced no arrivals (a closed loop at --max-concurrency, or every request at once,
    as `vllm bench serve` does by default): what the server completed and how much of it met the SLO. No
    per-replica rate can be read from such a run, so the sentence says how to get one."""
    runs = [r for r in rows if r.get("request_rate") in ("inf", None) and r.get("completed")
            and not r.get("interrupted")]
    if not runs:
        return None
    parts = []
    for r in runs:
        slots = r.get("max_concurrency") or r.get("users")  # --users: Locust's closed loop
        how = (f"{slots} in flight (closed loop)" if slots else f"all {r['completed'] + r.get('failed', 0)} requests at once")
        met = r.get("slo_attainment")
        parts.append(f"at {how} the server completed {r['request_throughput']:.3g} req/s, "
                     f"{r['output_throughput']:,.0f} output tok/s, P99 TTFT {r['p99_ttft_ms']:,.0f} ms, P99 TPOT "
                     f"{r['p99_tpot_ms']:.1f} ms" + (f"; {slo.describe()} met by {met:.1%}" if met is not None else ""))
    return "; ".join(parts) + " (a per-replica rate needs paced arrivals: `llmbench sweep --rate a..b`)"


def lower_rates(lowest: float) -> str:
    """A `--rate` range below a rate that already missed the SLO."""
    return f"{max(lowest / 10, 0.1):.2g}..{lowest:g}"


def capacity(points: list[dict], slo: SLO, unit: str = "req/s") -> Capacity:
    """`points`: {rate, attainment, saturated, kept_up[, client_stalled]} per measured finite rate. The highest
    rate that meets the SLO without saturating the server, interpolated towards the next rate by attainment,
    and never above what the server completed when it was overloaded (kept_up x rate at a saturated rate): a
    short run past the knee can still show good latencies, because the backlog has not had time to hurt them.
    The knee is never a rate that missed the SLO. A first miss whose attainment a stall of the client's own
    moved (`client_stalls`) is said: the answer may be the client's. `unit`: what a rate counts per second."""
    points = sorted(points, key=lambda p: p["rate"])
    if not points:
        raise SLOError("no finite-rate results to answer from (run `llmbench sweep`)")
    met = [p for p in points if p["attainment"] >= slo.attainment and not p.get("saturated")]
    lowest, highest = points[0]["rate"], points[-1]["rate"]
    if not met:
        return Capacity(None, f"even {lowest:g} {unit} missed it", lowest, highest, [], unit)
    best = met[-1]
    passing = [p["rate"] for p in met]
    after = [p for p in points if p["rate"] > best["rate"]]
    if not after:
        return Capacity(best["rate"], "the highest measured rate still met the SLO: a lower bound; sweep higher "
                        "rates", lowest, highest, passing, unit)
    nxt = after[0]
    next_attained = 0.0 if nxt.get("saturated") else nxt["attainment"]
    rate, note = best["rate"], f"interpolated between {best['rate']:g} and {nxt['rate']:g} {unit}"
    if best["attainment"] > next_attained:
        frac = (best["attainment"] - slo.attainment) / (best["attainment"] - next_attained)
        rate = best["rate"] + frac * (nxt["rate"] - best["rate"])
    overloaded = [(p["kept_up"] * p["rate"], p["rate"]) for p in after if p.get("saturated") and p.get("kept_up")]
    if overloaded:
        ceiling, at = min(overloaded)
        if ceiling < rate:
            rate = max(best["rate"], ceiling)
            note = (f"capped by the {ceiling:.3g} {unit} the server completed when overloaded at {at:g} {unit}"
                    if rate == ceiling else f"measured at {best['rate']:g} {unit}; not interpolated higher: the "
                    f"server completed {ceiling:.3g} {unit} when overloaded at {at:g} {unit}")
    if nxt.get("client_stalled") and not nxt.get("saturated"):
        note += (f"; {nxt['rate']:g} {unit} missed it with a stall of the client's own in its requests (its note): "
                 "measure that rate again before reading the answer as the server's")
    return Capacity(rate, note, lowest, highest, passing, unit)


def attainment_points(results: list[dict], frame, slo: SLO) -> list[dict]:
    """Per finite measured rate: the fraction of its requests within the SLO, recomputed from the per-request
    records (`frame`, as `llmbench.results.load_records` gives it), so any SLO can be put to any folder after the
    fact; with the run's own saturation verdict and kept-up fraction. Runs of one rate (`--append`: rate-2,
    rate-2-run2) are one point, their requests pooled, saturated if any was and kept up as the worst did: taken
    apart, the highest rate any one of them passed would be the answer, however many failed there."""
    from llmbench.results import runs_by_rate

    points = []
    for rate, runs in runs_by_rate(r for r in results if not (r.get("interrupted") or r.get("target_down"))).items():
        if math.isinf(rate):
            continue
        labels = [r["label"] for r in runs]
        kept = [r["kept_up"] for r in runs if r.get("kept_up") is not None]
        points.append({"rate": rate, "attainment": attained(frame, labels, slo) or 0.0,
                       "saturated": any(bool(r.get("saturated")) for r in runs), "kept_up": min(kept) if kept else None,
                       "label": labels[0], "runs": labels,
                       "client_stalled": any(bool(r.get("client_stall_moved_slo")) for r in runs)})
    return points


def attained(frame, label: str | list[str], slo: SLO) -> float | None:
    """The share of one result's (or several pooled) measured requests (warm-up excluded) within `slo`; None
    when it has none."""
    labels = [label] if isinstance(label, str) else label
    rows = frame[frame["label"].isin(labels)] if not frame.empty else frame
    if "warmup" in rows:
        rows = rows[~rows["warmup"].astype(bool)]
    if not len(rows):
        return None
    return float(np.mean(good_mask(rows["ttft"], rows["tpot"], rows["latency"], rows["success"], slo,
                                   rows.get("ttfo_bound"))))
