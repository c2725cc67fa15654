"""`synthetic`: lengths drawn from lognormals fitted to ShareGPT with the target's tokenizer; real text."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from bundled.sharegpt import load as load_sharegpt
from llmbench.datasets import DatasetInfo, Request, sharegpt
from llmbench.datasets.text import count_tokens, text_of_length

FIT_SAMPLE = 1000


@lru_cache(maxsize=4)
def fit_sharegpt(tokenizer) -> tuple[tuple[float, float], tuple[float, float]]:
    """(mu, sigma) in log space of prompt and output lengths of a vLLM-rules ShareGPT sample."""
    pairs = sharegpt.sample_pairs(load_sharegpt().conversations, FIT_SAMPLE, lambda t: count_tokens(tokenizer, t),
                                  seed=0, oversample=False)
    logs_in = np.log([p.prompt_len for p in pairs])
    logs_out = np.log([p.output_len for p in pairs])
    return (float(logs_in.mean()), float(logs_in.std())), (float(logs_out.mean()), float(logs_out.std()))


def lognormal_mean(mu: float, sigma: float) -> float:
    return float(np.exp(mu + sigma**2 / 2))


def build(tokenizer, num_requests: int, seed: int = 0, input_mean: float | None = None,
          output_mean: float | None = None, max_input: int = 1024, max_output: int = 1024
          ) -> tuple[list[Request], DatasetInfo]:
    (mu_in, sd_in), (mu_out, sd_out) = fit_sharegpt(tokenizer)
    rng = np.random.default_rng(seed)
    if input_mean:
        mu_in = float(np.log(input_mean) - sd_in**2 / 2)
    if output_mean:
        mu_out = float(np.log(output_mean) - sd_out**2 / 2)
    inputs = np.clip(rng.lognormal(mu_in, sd_in, num_requests), 4, max_input).astype(int)
    outputs = np.clip(rng.lognormal(mu_out, sd_out, num_requests), 4, max_output).astype(int)
    offsets = rng.integers(0, 2**31, size=num_requests)
    requests = [Request(text_of_length(tokenizer, int(i), int(o)), int(i), int(out))
                for i, out, o in zip(inputs, outputs, offsets, strict=True)]
    fit = {"input_mu": mu_in, "input_sigma": sd_in, "output_mu": mu_out, "output_sigma": sd_out}
    info = DatasetInfo("synthetic", f"lognormal lengths fitted to ShareGPT: input mean "
                       f"{lognormal_mean(mu_in, sd_in):.0f}, output mean {lognormal_mean(mu_out, sd_out):.0f} "
                       f"tokens (before clipping to {max_input}/{max_output}), seed {seed}",
                       {"input_mean": input_mean, "output_mean": output_mean, **fit})
    return requests, info
