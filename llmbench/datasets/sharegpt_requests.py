"""The default dataset: ShareGPT first turns sampled by vLLM's rules."""

from __future__ import annotations

from bundled.sharegpt import load as load_sharegpt
from llmbench.datasets import DatasetInfo, Request, sharegpt
from llmbench.datasets.text import count_tokens


def build(tokenizer, num_requests: int, seed: int = 0, path: str | None = None, output_len: int | None = None,
          min_len: int = 4, max_prompt_len: int = 1024, max_total_len: int = 2048, shuffle: bool = True,
          oversample: bool = True) -> tuple[list[Request], DatasetInfo]:
    load = load_sharegpt(path)
    limits = sharegpt.LengthFilter(min_len, max_prompt_len, max_total_len)
    pairs = sharegpt.sample_pairs(load.conversations, num_requests, lambda t: count_tokens(tokenizer, t), seed,
                                  output_len, limits, shuffle, oversample)
    requests = [Request(p.prompt, p.prompt_len, p.output_len, conversation_id=p.conversation_id) for p in pairs]
    description = (f"vLLM ShareGPT: first pair, >={min_len}, prompt<={max_prompt_len}, total<={max_total_len}, "
                   f"seed {seed}{', oversampled' if oversample else ''}; source {load.source} "
                   f"({len(load.conversations)} conversations)")
    options = {"path": path, "output_len": output_len, "min_len": min_len, "max_prompt_len": max_prompt_len,
               "max_total_len": max_total_len, "source": load.source, "conversations": len(load.conversations)}
    notes = [load.damage] if load.damage and path is not None else []  # the packaged copy is cut on purpose
    return requests, DatasetInfo("sharegpt", description, options, notes)
