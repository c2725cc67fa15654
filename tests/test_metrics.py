"""Every metric from hand-made records with known answers (vLLM's definitions)."""

import math

import pytest

from llmbench import metrics
from llmbench.records import RequestRecord
from llmbench.saturation import verdict


def rec(i, start, chunks, tokens, success=True, prompt=10, scheduled=None, dispatched=None):
    return RequestRecord(index=i, scheduled=start if scheduled is None else scheduled,
                         dispatched=start if dispatched is None else dispatched, start=start,
                         end=chunks[-1] if chunks else start + 0.01, chunk_times=chunks, prompt_len=prompt,
                         output_tokens=tokens, success=success, status=200 if success else 500,
                         error="" if success else "HTTP 500: boom")


RECORDS = [
    rec(0, 0.0, [0.1, 0.15, 0.25], 5),  # 3 chunks carrying 5 tokens
    rec(1, 1.0, [1.2], 1),  # one-token output (a first chunk with empty text still counts)
    rec(2, 1.5, [], None, success=False),
    rec(3, 0.2, [0.3, 0.32, 0.34, 0.36], 4),
]


def test_core_definitions():
    m = metrics.compute(RECORDS, duration=2.0, percentiles=(50, 99), goodput={"ttft": 150})
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 30 and m["total_output_tokens"] == 10
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(5.0)
    assert m["total_token_throughput"] == pytest.approx(20.0)
    # TTFT: 100, 200, 100 ms
    assert m["mean_ttft_ms"] == pytest.approx(400 / 3)
    assert m["median_ttft_ms"] == pytest.approx(100)
    assert m["p99_ttft_ms"] == pytest.approx(100 + 0.98 * 100)
    # TPOT only for n > 1: (0.25-0.1)/4 = 37.5 ms, (0.36-0.3)/3 = 20 ms
    assert m["mean_tpot_ms"] == pytest.approx(28.75)
    # ITL pooled per chunk: 50, 100, 20, 20, 20 ms
    assert m["mean_itl_ms"] == pytest.approx(42.0)
    assert m["median_itl_ms"] == pytest.approx(20.0)
    # E2EL: 250, 200, 160 ms
    assert m["median_e2el_ms"] == pytest.approx(200)
    # goodput: TTFT <= 150 ms holds for requests 0 and 3
    assert m["request_goodput"] == pytest.approx(1.0)
    assert m["max_concurrent_requests"] == 2
    assert m["max_output_tokens_per_s"] == 7  # chunks in second 0: 3 + 4
    assert m["errors"] == {"HTTP 500": 1}


def test_goodput_inclusive_and_tpot_zero_for_one_token():
    m = metrics.compute(RECORDS, duration=1.0, goodput={"ttft": 200, "tpot": 37.5})
    assert m["request_goodput"] == pytest.approx(3.0)  # bounds are inclusive; n=1 has TPOT 0
    m = metrics.compute(RECORDS, duration=1.0, goodput={"e2el": 199})
    assert m["request_goodput"] == pytest.approx(1.0)


def test_without_usage_counts_chunks():
    r = rec(0, 0.0, [0.1, 0.2, 0.3], None)
    m = metrics.compute([r], duration=1.0)
    assert m["total_output_tokens"] == 3 and m["mean_tpot_ms"] == pytest.approx(100)


def test_no_success_gives_zeros():
    m = metrics.compute([rec(0, 0.0, [], None, success=False)], duration=1.0)
    assert m["completed"] == 0 and m["mean_ttft_ms"] == 0.0 and m["output_throughput"] == 0.0


def test_warmup_excluded():
    warm = rec(9, 0.0, [5.0], 100)
    warm.warmup = True
    m = metrics.compute([warm, *RECORDS], duration=2.0)
    assert m["completed"] == 3 and m["total_output_tokens"] == 10


def test_one_slo_syntax_with_the_old_spellings():
    from llmbench.slo import SLO, parse_slo

    assert parse_slo("ttft=500ms,tpot=0.05s").bounds == {"ttft": 500.0, "tpot": 50.0}
    assert parse_slo("ttft:500 tpot:50").bounds == {"ttft": 500.0, "tpot": 50.0}  # vLLM's --goodput
    assert parse_slo(["e2el:3000"]).bounds == {"e2el": 3000.0}
    assert parse_slo(None) == SLO() and SLO().bounds == {"ttft": 2000.0, "tpot": 100.0}  # MLPerf server
    assert SLO().describe() == "P99 TTFT <= 2 s and P99 TPOT <= 100 ms"
    for bad in ("latency:5", "ttft", "ttft:-1", "ttft=fast"):
        with pytest.raises(ValueError):
            parse_slo(bad)


def test_client_health_flags_lag():
    late = [rec(i, i * 0.1, [i * 0.1 + 0.05], 1, scheduled=i * 0.1, dispatched=i * 0.1 + 0.05) for i in range(1, 30)]
    m = metrics.compute(late, requested_rate=10.0)
    assert m["p99_send_lag_ms"] == pytest.approx(50) and m["client_overloaded"]
    on_time = [rec(i, i * 0.1, [i * 0.1 + 0.05], 1) for i in range(1, 30)]
    m = metrics.compute(on_time, requested_rate=10.0)
    assert not m["client_overloaded"] and m["achieved_rate"] == pytest.approx(10.0, rel=0.01)


def conversations(count: int, turns: int, turn_s, think_s: float = 1.0, gap: float = 1.0) -> list[RequestRecord]:
    """A multi-turn run opening a conversation every `gap` seconds: each later turn goes `think_s` after the reply
    before it, and takes `turn_s(conversation)` seconds (20 tokens)."""
    out = []
    for c in range(count):
        t = c * gap
        for turn in range(turns):
            r = rec(len(out), t, [t + turn_s(c) * (k + 1) / 20 for k in range(20)], 20)
            r.conversation_id, r.turn = f"c{c}", turn
            out.append(r)
            t = r.end + think_s
    return out


def test_a_multi_turn_rate_is_conversations_started():
    """vLLM-CPU, `--dataset multi-turn --max-turns 3 --rate 1 --num-prompts 12`: 12 conversations opened over 12 s,
    their later turns (each after the reply before it) ran to 43 s, so 33 requests over 43 s read "sent 0.77 req/s
    of 1 requested: client overloaded", and the number in flight falling as conversations ended read "kept up
    147 %". Only the openers follow the rate, and a conversation is what arrives."""
    short = metrics.compute(conversations(12, 3, lambda c: 15.0), requested_rate=1.0)
    assert not short["client_overloaded"] and short["achieved_rate"] == pytest.approx(12 / 11)
    assert short["kept_up"] is None  # 12 conversations are too few to tell
    steady = metrics.compute(conversations(90, 3, lambda c: 2.0), requested_rate=1.0)
    assert steady["kept_up"] == pytest.approx(1.0, abs=0.05) and verdict(steady | {"request_rate": 1.0}) is None
    queued = metrics.compute(conversations(90, 3, lambda c: 2.0 + 0.1 * c), requested_rate=1.0)
    assert queued["kept_up"] < 0.9 and "of 1 conversations/s" in verdict(queued | {"request_rate": 1.0})
    assert "conversations took" in metrics.compute(conversations(40, 3, lambda c: 15.0),
                                                   requested_rate=1.0)["window_note"]
    at_once = metrics.compute(conversations(40, 3, lambda c: 2.0 + 0.1 * c, gap=0.0), requested_rate=math.inf)
    assert at_once["kept_up"] is None  # the scenario `agent` on vLLM-CPU, all at once: it read "kept up 120 %"


def test_runs_of_one_rate_are_one_point_of_the_capacity_answer():
    """`sweep --append` repeats a rate (rate-2, rate-2-run2): the capacity answer pools their requests. Taken
    apart, the run at 2 req/s that met the SLO made 2 the answer although its repeat missed it badly."""
    import pandas as pd

    from llmbench.slo import SLO, attainment_points, capacity

    def rows(label, good, bad):
        n = good + bad
        return pd.DataFrame({"label": [label] * n, "warmup": [False] * n, "success": [True] * n,
                             "ttft": [0.1] * good + [5.0] * bad, "tpot": [0.01] * n, "latency": [1.0] * n})

    frame = pd.concat([rows("rate-1", 100, 0), rows("rate-2", 100, 0), rows("rate-2-run2", 60, 40)])
    results = [{"label": "rate-1", "request_rate": 1, "kept_up": 1.0},
               {"label": "rate-2-run2", "request_rate": 2, "kept_up": 0.9, "saturated": "queue grew"},
               {"label": "rate-2", "request_rate": 2, "kept_up": 1.0}]
    slo = SLO(ttft_ms=500, tpot_ms=100)
    points = sorted(attainment_points(results, frame, slo), key=lambda p: p["rate"])
    assert [(p["rate"], p["label"], p["runs"]) for p in points] == [
        (1.0, "rate-1", ["rate-1"]), (2.0, "rate-2", ["rate-2", "rate-2-run2"])]
    assert points[1]["attainment"] == pytest.approx(160 / 200)
    assert points[1]["saturated"] and points[1]["kept_up"] == 0.9
    pooled = capacity(points, slo)
    assert pooled.passing == [1.0] and pooled.rate < 1.1
    alone = [p for p in points if p["rate"] == 1.0] + [{"rate": 2.0, "attainment": 1.0, "saturated": False,
                                                         "kept_up": 1.0}]
    assert capacity(alone, slo).passing == [1.0, 2.0]
