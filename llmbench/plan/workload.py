"""The planner's workload: prompt and output lengths defined exactly as `llmbench run` defines them (the same
dataset builders and flags), or taken from a results folder's own requests."""

from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

PLANNABLE = ("sharegpt", "random", "synthetic", "jsonl")


@dataclass
class Workload:
    prompts: np.ndarray
    outputs: np.ndarray
    source: str
    prefix_hit_rate: float = 0.0

    @property
    def mean_prompt(self) -> float:
        return float(self.prompts.mean())

    @property
    def mean_output(self) -> float:
        return float(self.outputs.mean())

    @property
    def max_tokens(self) -> int:
        return int((self.prompts + self.outputs).max())

    def scaled(self, factor: float, why: str, output_factor: float | None = None) -> Workload:
        """Lengths counted by another tokenizer (`factor` of this one's counts; outputs by `output_factor` where
        a source counted its prompts and outputs apart)."""
        out = factor if output_factor is None else output_factor
        return Workload(np.maximum(np.round(self.prompts * factor), 1).astype(int),
                        np.maximum(np.round(self.outputs * out), 1).astype(int), f"{self.source}, {why}",
                        self.prefix_hit_rate)

    def with_means(self, prompt: float, output: float) -> Workload:
        """This sample rescaled to the mean prompt and output lengths a source counted with its own tokenizer."""
        return self.scaled(prompt / self.mean_prompt, f"rescaled to {prompt:g} prompt / {output:g} output tokens "
                           "per request", output / self.mean_output)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(0, len(self.prompts), n)
        return self.prompts[idx], self.outputs[idx]


def from_dataset(name: str, options: dict, num_prompts: int = 1000, tokenizer: str | None = None,
                 seed: int = 0) -> Workload:
    """`--dataset` with its options, lengths in `tokenizer`'s tokens (default: the bundled model's)."""
    from llmbench.datasets import DatasetError

    if name not in PLANNABLE:
        raise DatasetError(f"the planner takes the {', '.join(PLANNABLE)} datasets; {name!r} needs a measured "
                           "sweep (plan --results)")
    if name == "random":
        from llmbench.datasets.random_lengths import uniform_lengths

        rng = np.random.default_rng(seed)
        ratio = options.get("range_ratio") or 0.0
        prompts = uniform_lengths(rng, options.get("input_len", 1024), ratio, num_prompts)
        outputs = uniform_lengths(rng, options.get("output_len", 128), ratio, num_prompts)
        return Workload(np.asarray(prompts), np.asarray(outputs),
                        f"random: input {options.get('input_len', 1024)}, output {options.get('output_len', 128)}"
                        f"{f', range ratio {ratio}' if ratio else ''}")
    tok_path = tokenizer or _bundled_tokenizer()
    cache = _cache_file(name, options, num_prompts, tok_path, seed)
    if cache.is_file():
        data = np.load(cache, allow_pickle=False)
        return Workload(data["prompts"], data["outputs"], str(data["source"]))
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from llmbench import datasets

    hf_logging.set_verbosity_error()
    if sys.stderr.isatty():  # the first plan in a fresh home tokenizes for 15-35 s: say so, once
        print(f"counting the {name} sample's tokens ({num_prompts} requests; cached for the next plan)...",
              file=sys.stderr, flush=True)
    requests, info = datasets.build(name, AutoTokenizer.from_pretrained(tok_path), num_prompts, seed, **options)
    who = "bundled tokenizer" if tokenizer is None else f"tokenizer {tok_path}"
    # a trace's timestamps are not replayed here: its lengths are, at the rate the question gives
    description = info.description.replace(" (trace timestamps)", "; timestamps not replayed: arrivals are "
                                                                   "Poisson at the rate asked")
    work = Workload(np.array([r.prompt_len for r in requests]), np.array([r.output_len for r in requests]),
                    f"{description} ({len(requests)} requests, {who})")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, prompts=work.prompts, outputs=work.outputs, source=work.source)
    return work


def from_results(folder: Path) -> Workload:
    """The successful requests of a results folder, as measured."""
    from llmbench.results import load_records

    frame = load_records(folder)
    ok = frame[frame["success"]] if not frame.empty else frame
    if ok.empty:
        raise ValueError(f"{folder}: no successful requests to take the workload from")
    return Workload(ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(), f"measured requests in {folder}")


def sent_times(ok) -> np.ndarray:
    """When the server received each measured request: the actual send (`start`, from which TTFT is timed),
    not the arrival process's schedule. They differ where the client fell behind (a load generator starved of
    CPU by a server on the same cores held 7 sends for 1.6 s, then sent them at once): replayed at the schedule,
    that burst is smoothed away while its queueing is in the measured TTFTs. Records without a send time (all
    `start` 0) fall back to the schedule."""
    start = ok["start"].to_numpy(dtype=float)
    return start if len(start) and start.any() else ok["scheduled"].to_numpy(dtype=float)


def _bundled_tokenizer() -> str:
    from bundled.modelbuild import build_model

    return str(build_model())


def _cache_file(name: str, options: dict, n: int, tokenizer: str, seed: int) -> Path:
    """Lengths are cached: tokenizing ShareGPT takes seconds, the plan's simulations take less."""
    from bundled.modelbuild import llmbench_home

    key = repr((name, sorted(options.items()), n, str(Path(tokenizer).resolve()), seed)).encode()
    if options.get("path") and Path(options["path"]).is_file():
        key += str(Path(options["path"]).stat().st_mtime_ns).encode()
    return llmbench_home() / "plan-workloads" / f"{name}-{hashlib.sha1(key).hexdigest()[:16]}.npz"
