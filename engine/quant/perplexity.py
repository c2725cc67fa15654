"""Perplexity of an idle engine's model on token windows: the quality check for quantized modes."""

from __future__ import annotations

import math

import torch

from engine.llm import LLM
from engine.step_inputs import Chunk


def heldout_windows(tokenizer, num_windows: int, seq_len: int) -> list[list[int]]:
    """Windows from the end of ShareGPT; calibration (engine.quant.quantize) reads from its start."""
    from bundled import sharegpt

    windows, buffer = [], []
    for conv in reversed(sharegpt.load().conversations):
        for _, text in conv.turns:
            buffer += tokenizer(text).input_ids
            while len(buffer) >= seq_len and len(windows) < num_windows:
                windows.append(buffer[:seq_len])
                buffer = buffer[seq_len:]
        if len(windows) >= num_windows:
            break
    return windows


@torch.inference_mode()
def score(llm: LLM, windows: list[list[int]], chunk: int = 64) -> tuple[float, list[torch.Tensor]]:
    """exp(mean next-token NLL) over all windows, and each window's logits [len, vocab]. Windows go in
    `chunk`-token pieces, so later pieces attend to K/V read back from the cache (fp8 KV shows)."""
    if llm.has_unfinished():
        raise RuntimeError("perplexity needs an idle engine (its KV pool is borrowed)")
    bs = llm.config.block_size
    nll, count, all_logits = 0.0, 0, []
    for ids in windows:
        table = list(range(math.ceil(len(ids) / bs)))
        logits = torch.cat([llm.runner.forward([Chunk(ids[i : i + chunk], i, table, len(ids[i : i + chunk]))])
                            for i in range(0, len(ids), chunk)])
        logp = torch.log_softmax(logits[:-1].float(), dim=-1)
        nll -= float(logp.gather(1, torch.tensor(ids[1:], device=logp.device)[:, None]).sum())
        count += len(ids) - 1
        all_logits.append(logits)
    return math.exp(nll / count), all_logits
