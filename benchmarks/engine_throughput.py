"""Offline throughput: continuous vs static batching vs transformers' padded `generate`, one run.

    python benchmarks/engine_throughput.py [--num-prompts 256] [--vllm-python PATH]
    python benchmarks/engine_throughput.py --dtype float32,auto --repeats 3 --vllm-python PATH  # like for like
    python benchmarks/engine_throughput.py --workload nano-vllm --device cuda --dtype bfloat16 --eager-too

Every system gets the same prompts (token ids) and the same output lengths (ignore_eos): ShareGPT sampled by
vLLM's rules, or nano-vllm's benchmark workload (256 sequences, random prompt and output lengths uniform in
100..1024, which needs no dataset). Prints tokens/s, ratios, the engine's mean host time per step and the
fraction of the run the device was busy, and the machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bundled.modelbuild import build_model  # noqa: E402
from bundled.sharegpt import load as load_sharegpt  # noqa: E402
from engine.config import SamplingParams  # noqa: E402
from engine.kernels import cpu_kernels  # noqa: E402
from engine.llm import LLM  # noqa: E402
from llmbench.datasets import sharegpt  # noqa: E402
from llmbench.machine import machine  # noqa: E402


def matmul_ceiling(dtype: str = "float32") -> float:
    """This machine's matmul FLOP/s now in `dtype` on 2048³: the faster of F.linear and a pre-packed oneDNN GEMM
    (engine.md measured 175 GFLOP/s with F.linear on an AVX2-only VM; on an AMD Zen 5 fp32 F.linear reached
    165-183 and the packed GEMM 414-435, bf16 830 and 856)."""
    import torch.nn.functional as F

    x, w = torch.randn(2048, 2048, dtype=getattr(torch, dtype)), torch.randn(2048, 2048, dtype=getattr(torch, dtype))
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, None) if torch.backends.mkldnn.is_available() else None
    except RuntimeError:  # a CPU without the dtype's oneDNN kernels
        packed = None
    best = float("inf")
    for fn in [lambda: F.linear(x, w)] + ([lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")]
                                          if packed is not None else []):
        fn()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        best = min(best, (time.perf_counter() - t0) / 5)
    return 2 * 2048**3 / best


def nano_vllm_workload(vocab: int, n: int, seed: int, longest: int = 1024) -> list[tuple[list[int], int]]:
    """nano-vllm's bench.py: random token ids, prompt and output lengths uniform in 100..1024 (scaled down with
    `longest` for a quick check)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    low = max(longest * 100 // 1024, 1)
    return [(rng.integers(3, vocab, int(rng.integers(low, longest + 1))).tolist(), int(rng.integers(low, longest + 1)))
            for _ in range(n)]


def sample(model_dir: Path, n: int, seed: int) -> list[tuple[list[int], int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    pairs = sharegpt.sample_pairs(load_sharegpt().conversations, n, lambda t: len(tok(t).input_ids), seed=seed)
    return [(tok(p.prompt).input_ids, p.output_len) for p in pairs]


STEP_FIGURES: dict[str, dict] = {}  # run name -> host ms per step, device-busy fraction


def run_engine(model_dir: Path, reqs, name: str = "", torch_reductions: bool = False, **config) -> float:
    """`torch_reductions`: the tiled prefill's softmax and greedy argmax as torch ops (the ablation of the C++ ones,
    which the engine takes wherever its C++ library is loaded)."""
    loaded = cpu_kernels.loaded
    if torch_reductions:
        cpu_kernels.loaded = lambda: False
    try:
        return _run_engine(model_dir, reqs, name, **config)
    finally:
        cpu_kernels.loaded = loaded


def _run_engine(model_dir: Path, reqs, name: str = "", **config) -> float:
    config = {"kv_cache_memory": 4 * 2**30, **config}
    llm = LLM(model_dir, max_model_len=2048, stats_window=1_000_000, **config)
    few = re.search(r"steps of <= \d+ rows: C\+\+ GEMV|no few-row kernel", llm.runner.linear_path)
    linears = llm.runner.linear_path.split(" (")[0] + (f", {few.group(0)}" if few else "")
    print(f"engine {config}: linears {linears}, decode attention "
          f"{llm.runner.decode_attention}, prefill attention {llm.runner.prefill_attention}, CUDA graphs "
          f"{llm.runner.graphs is not None}", flush=True)
    llm.generate([reqs[0][0]], SamplingParams(temperature=0, max_tokens=4))
    params = [SamplingParams(temperature=0, max_tokens=out, ignore_eos=True) for _, out in reqs]
    before = dict(llm.stats.totals)
    t0 = time.perf_counter()
    outs = llm.generate([p for p, _ in reqs], params)
    elapsed = time.perf_counter() - t0
    assert [len(o.outputs[0].token_ids) for o in outs] == [out for _, out in reqs]
    steps = llm.stats.totals["steps"] - before["steps"]
    device = llm.stats.totals["device_seconds"] - before["device_seconds"]
    decode = [s for s in llm.stats.steps if s.num_prefill_tokens == 0 and s.num_seqs >= 0.9 * min(len(reqs), 256)]
    STEP_FIGURES[name] = {"steps": steps, "host_ms_per_step": (elapsed - device) / max(steps, 1) * 1e3,
                          "busy": device / elapsed, "fixed_s": fixed_step_seconds(
                              [s for s in llm.stats.steps if s.index >= before["steps"]]),
                          "host_ms_full_decode": 1e3 * sum(s.step_seconds - s.device_seconds for s in decode)
                          / max(len(decode), 1) if decode else None}
    return elapsed


def fixed_step_seconds(steps: list) -> float | None:
    """What a decode step costs whatever its batch: the intercept of a least-squares fit of the run's decode
    step times on sequences and context tokens (reading the weights, per-layer work), or None with too few steps."""
    import numpy as np

    decode = [s for s in steps if s.num_prefill_tokens == 0]
    if len(decode) < 10:
        return None
    x = np.array([[1.0, s.num_seqs, s.num_context_tokens] for s in decode])
    return float(np.linalg.lstsq(x, np.array([s.step_seconds for s in decode]), rcond=None)[0][0])


def why_static(cont: dict, static: dict, cont_seconds: float, ideal_seconds: float | None) -> str:
    """Both modes do the same tokens' work; static batching takes more steps, each with the fixed cost on top,
    so the extra steps times that cost predict the ratio; with the work itself at the matmul ceiling
    (`ideal_seconds`) the same extra steps bound it."""
    fixed = cont["fixed_s"]
    extra = (static["steps"] - cont["steps"]) * fixed
    line = (f"  why: static took {static['steps']:,} steps to continuous's {cont['steps']:,}; a decode step costs "
            f"{fixed * 1e3:.1f} ms whatever its batch (intercept of a fit over continuous's decode steps), so the "
            f"extra steps predict {1 + extra / cont_seconds:.2f}×")
    if ideal_seconds:
        line += (f"; with every FLOP at the matmul ceiling it could be at most "
                 f"{1 + extra / (cont['steps'] * fixed + ideal_seconds):.2f}×")
    return line


def run_transformers(model_dir: Path, reqs, batch_size: int, device: str = "cpu", dtype: str = "float32") -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype)).to(device).eval()
    pad = model.config.pad_token_id
    t0 = time.perf_counter()
    for i in range(0, len(reqs), batch_size):
        chunk = reqs[i : i + batch_size]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p, _ in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk], device=device)
        new = max(out for _, out in chunk)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=pad)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


VLLM_SCRIPT = """
import json, sys, time
from vllm import LLM, SamplingParams, TokensPrompt

if __name__ == "__main__":  # vLLM spawns its engine-core process, which re-imports this file
    model, path, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
    reqs = json.load(open(path))
    llm = LLM(model=model, dtype=dtype, max_model_len=2048, seed=0)
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for _, o in reqs]
    prompts = [TokensPrompt(prompt_token_ids=p) for p, _ in reqs]
    llm.generate(prompts[:1], [SamplingParams(temperature=0, max_tokens=4)], use_tqdm=False)
    t0 = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    print("ELAPSED", time.perf_counter() - t0)
"""


def run_vllm(python: str, model_dir: Path, reqs, dtype: str = "float32") -> float:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "reqs.json"
        data.write_text(json.dumps(reqs))
        script = Path(tmp) / "run_vllm.py"
        script.write_text(VLLM_SCRIPT)
        # THP_MEM_ALLOC_ENABLE: torch backs vLLM's large tensors (its KV cache) with 2 MiB pages, as our engine
        # does for its pool (model_runner.huge_pages), so neither pays 4 KiB-page TLB misses the other does not
        env = {"VLLM_CPU_KVCACHE_SPACE": "4", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "THP_MEM_ALLOC_ENABLE": "1",
               "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([python, str(script), str(model_dir), str(data), dtype], capture_output=True,
                              text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    return float(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ELAPSED")))


def flops(model_dir: Path, reqs) -> float:
    """Matmul FLOPs of the work itself: linear layers per token, attention per (query, key) pair."""
    cfg = json.loads((model_dir / "config.json").read_text())
    h, layers, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * cfg["hidden_size"] // cfg["num_attention_heads"]
    per_token = layers * (h * (h + 2 * kv) + h * h + 3 * h * inter)
    total = 0.0
    for prompt, out in reqs:
        tokens = len(prompt) + out
        pairs = tokens * (tokens + 1) / 2
        total += 2 * per_token * tokens + 2 * cfg["vocab_size"] * h * out + 4 * layers * h * pairs
    return total


def resolve_dtype(dtype: str, model_dir: Path, device: str) -> str:
    if dtype != "auto":
        return dtype
    from engine.layers import cpu_dtype

    cfg = json.loads((model_dir / "config.json").read_text())
    chosen, why = cpu_dtype.resolve("auto", torch.device(device), cfg["hidden_size"], cfg["intermediate_size"])
    print(f"--dtype auto: {chosen} ({why})")
    return chosen


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


@click.command()
@click.option("--num-prompts", default=256, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--hf-batch-sizes", default="16,64", show_default=True)
@click.option("--static-batch-sizes", default="16,64", show_default=True,
              help="Static batching runs, at the same batch sizes as transformers for a like-for-like view.")
@click.option("--vllm-python", help="Python of a virtual environment with vllm-cpu installed (optional peer).")
@click.option("--model-size", default="small", show_default=True, help="Bundled model size to build and run.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True,
              help="One or more, comma-separated (float32,auto: both, like for like). auto: what the engine's "
                   "--dtype auto picks for this model here (vLLM and transformers get it too).")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1),
              help="Run every system this many times, alternating, and compare medians (the matmul ceiling: the "
                   "best reading): on a shared machine the load drifts between two runs a minute apart.")
@click.option("--kv-cache-memory", default=4 * 2**30, show_default=True, type=int)
@click.option("--sdpa-ablation/--no-sdpa-ablation", default=True, show_default=True,
              help="CPU: also run continuous batching with gather + SDPA decodes instead of the C++ kernel.")
@click.option("--prefill-ablation/--no-prefill-ablation", default=False, show_default=True,
              help="CPU: also run continuous batching with SDPA prefills, whatever the load-time timing chose.")
@click.option("--reductions-ablation/--no-reductions-ablation", default=False, show_default=True,
              help="CPU: also run continuous batching with torch's masked softmax and max(dim) in place of the C++ "
                   "row reductions (the tiled prefill's causal softmax, greedy argmax).")
@click.option("--gemv-ablation/--no-gemv-ablation", default=False, show_default=True,
              help="CPU: also run continuous batching without the few-row linear kernel (oneDNN or F.linear at "
                   "every row count).")
@click.option("--workload", type=click.Choice(["sharegpt", "nano-vllm"]), default="sharegpt", show_default=True)
@click.option("--max-num-batched-tokens", default=2048, show_default=True)
@click.option("--eager-too", is_flag=True, help="CUDA: run every engine configuration without CUDA graphs as well.")
@click.option("--hf-num-prompts", type=int, help="transformers: only the first N requests (its tok/s is compared).")
@click.option("--nano-max-len", default=1024, show_default=True, help="nano-vllm workload: the longest length.")
def main(num_prompts: int, seed: int, hf_batch_sizes: str, static_batch_sizes: str, vllm_python: str | None,
         model_size: str, device: str, dtype: str, repeats: int, kv_cache_memory: int, sdpa_ablation: bool,
         prefill_ablation: bool, reductions_ablation: bool, gemv_ablation: bool, workload: str,
         max_num_batched_tokens: int, eager_too: bool, hf_num_prompts: int | None, nano_max_len: int) -> None:
    torch.manual_seed(0)
    model_dir = build_model(model_size)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    reqs = sample(model_dir, num_prompts, seed) if workload == "sharegpt" else \
        nano_vllm_workload(vocab, num_prompts, seed, nano_max_len)
    n_in = sum(len(p) for p, _ in reqs)
    n_out = sum(o for _, o in reqs)
    host = machine()
    gpu = f", {torch.cuda.get_device_name(device)}" if device.startswith("cuda") else ""
    print(f"machine: {host['cpu_model'] or host['processor']}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}{gpu}; ISA "
          f"{', '.join(host['isa']) or 'unknown'}")
    what = "ShareGPT requests (vLLM rules" if workload == "sharegpt" else "nano-vllm requests (lengths 100..1024"
    print(f"workload: {num_prompts} {what}, seed {seed}), {n_in} prompt + {n_out} output tokens, {model_size} "
          "model, ignore_eos\n")
    best: dict[str, tuple[float, str]] = {}  # system -> (best output tok/s, its dtype)
    for asked in dtype.split(","):
        chosen = resolve_dtype(asked.strip(), model_dir, device)
        figures = run_dtype(chosen, model_dir, reqs, device, kv_cache_memory, max_num_batched_tokens,
                            {"SDPA decode": sdpa_ablation, "SDPA prefill": prefill_ablation,
                             "torch reductions": reductions_ablation, "no few-row kernel": gemv_ablation},
                            static_batch_sizes,
                            hf_batch_sizes, hf_num_prompts, eager_too, vllm_python, repeats)
        for system in ("engine continuous", "vLLM CPU offline"):
            if system in figures and n_out / figures[system] > best.get(system, (0, ""))[0]:
                best[system] = (n_out / figures[system], chosen)
    if len(best) == 2 and len(dtype.split(",")) > 1:
        (e, e_dtype), (v, v_dtype) = best["engine continuous"], best["vLLM CPU offline"]
        print(f"\nbest of each: engine {e:.0f} out tok/s ({e_dtype}) / vLLM CPU {v:.0f} ({v_dtype}) = {e / v:.2f}× "
              "(target ≥ 1)")


def run_dtype(dtype: str, model_dir: Path, reqs, device: str, kv_cache_memory: int, max_num_batched_tokens: int,
              ablations: dict[str, bool], static_batch_sizes: str, hf_batch_sizes: str, hf_num_prompts: int | None,
              eager_too: bool, vllm_python: str | None, repeats: int) -> dict[str, float]:
    """Every system in one dtype; prints its table and returns seconds per system (medians of the repeats)."""
    n_in = sum(len(p) for p, _ in reqs)
    n_out = sum(o for _, o in reqs)
    STEP_FIGURES.clear()
    where = {"device": device, "dtype": dtype, "kv_cache_memory": kv_cache_memory,
             "max_num_batched_tokens": max_num_batched_tokens}
    configs = {}
    if device == "cpu" and ablations["SDPA decode"]:
        configs["engine continuous, SDPA decode"] = {"max_num_seqs": 256, "cpu_attention": "sdpa"}
    if device == "cpu" and ablations["SDPA prefill"]:
        configs["engine continuous, SDPA prefill"] = {"max_num_seqs": 256, "cpu_prefill_attention": "sdpa"}
    if device == "cpu" and ablations["torch reductions"]:
        configs["engine continuous, torch reductions"] = {"max_num_seqs": 256, "torch_reductions": True}
    if device == "cpu" and ablations["no few-row kernel"]:
        configs["engine continuous, no few-row kernel"] = {"max_num_seqs": 256, "cpu_gemv": "off"}
    configs |= {f"engine static (batch {bs})": {"batching": "static", "max_num_seqs": bs}
                for bs in (int(b) for b in static_batch_sizes.split(",") if b)}
    if eager_too and device.startswith("cuda"):
        configs |= {f"{name}, eager": {**flags, "enforce_eager": True} for name, flags in
                    [("engine continuous", {"max_num_seqs": 256}), *configs.items()]}
    pairs: dict[str, list[float]] = {"engine continuous": [], "vLLM CPU offline": []}
    others: dict[str, list[float]] = {name: [] for name in configs}
    readings: dict[str, list[float]] = {}  # matmul ceilings, read once per round: the best is the least disturbed
    step_figures = []
    for _ in range(repeats):  # every engine system and vLLM alternate, so drift in the load hits them all
        pairs["engine continuous"].append(run_engine(model_dir, reqs, "engine continuous", max_num_seqs=256,
                                                     **where))
        step_figures.append(STEP_FIGURES["engine continuous"])
        if vllm_python:
            try:
                pairs["vLLM CPU offline"].append(run_vllm(vllm_python, model_dir, reqs, dtype))
            except RuntimeError as err:  # a peer failing must not lose what was measured
                print(err)
                vllm_python = None
        for name, flags in configs.items():
            others[name].append(run_engine(model_dir, reqs, name, **flags, **where))
        if device == "cpu":
            for d in dict.fromkeys(["float32", dtype]):
                readings.setdefault(d, []).append(matmul_ceiling(d))
    runs = {name: median(times) for name, times in (pairs | others).items() if times}
    times = pairs["engine continuous"]  # host figures of the run at (or just below) the median
    STEP_FIGURES["engine continuous"] = step_figures[sorted(range(repeats), key=times.__getitem__)[(repeats - 1) // 2]]
    hf_reqs = reqs[:hf_num_prompts] if hf_num_prompts else reqs
    hf_scale = sum(o for _, o in reqs) / sum(o for _, o in hf_reqs)  # seconds as if it had done every request
    for bs in (int(b) for b in hf_batch_sizes.split(",") if b):
        runs[f"transformers generate (batch {bs})"] = run_transformers(model_dir, hf_reqs, bs, device, dtype) * hf_scale

    best_hf = min((t for k, t in runs.items() if k.startswith("transformers")), default=None)
    cont = runs["engine continuous"]
    print(f"\n--dtype {dtype}" + (f" (medians of {repeats} alternating runs of every system)" if repeats > 1 else ""))
    print(f"{'system':<40}{'seconds':>9}{'output tok/s':>14}{'total tok/s':>13}{'continuous ×':>14}"
          f"{'host ms/step':>14}{'busy':>7}{'steps':>8}")
    for name, t in runs.items():
        step = STEP_FIGURES.get(name)
        extra = f"{step['host_ms_per_step']:>14.2f}{step['busy']:>7.0%}{step['steps']:>8,}" if step else ""
        print(f"{name:<40}{t:>9.1f}{n_out / t:>14.0f}{(n_in + n_out) / t:>13.0f}{t / cont:>14.2f}{extra}")
    for name, step in STEP_FIGURES.items():
        if step["host_ms_full_decode"] is not None:
            print(f"{name}: host time per decode step with a full batch {step['host_ms_full_decode']:.2f} ms")
    work = flops(model_dir, reqs)
    achieved = work / cont
    ceilings = {d: max(r) for d, r in readings.items()}
    if ceilings:
        print(f"matmul ceilings (2048³, best of {repeats} reading{'s' * (repeats > 1)}, one per round): "
              + ", ".join(f"{d} {c / 1e9:.0f} GFLOP/s" for d, c in ceilings.items())
              + (f" (readings {'; '.join(d + ' ' + ', '.join(f'{x / 1e9:.0f}' for x in r) for d, r in readings.items())})"
                 if repeats > 1 else ""))
    ceiling = ceilings.get(dtype)
    print(f"engine continuous: {achieved / 1e9:.0f} GFLOP/s"
          + (f" = {achieved / ceiling:.0%} of this machine's {ceiling / 1e9:.0f} GFLOP/s {dtype} matmul ceiling "
             "(measured in this run)" if ceiling else ""))
    for name, t in runs.items():
        if name.startswith("engine static"):
            by_run = [s / c for c, s in zip(pairs["engine continuous"], others[name], strict=True)]
            print(f"continuous / {name.removeprefix('engine ')}: {t / cont:.2f}× (target ≥ 1.5)"
                  + (f"; run by run {', '.join(f'{r:.2f}' for r in by_run)}" if repeats > 1 else ""))
            c_step, s_step = STEP_FIGURES["engine continuous"], STEP_FIGURES.get(name)
            if s_step and (c_step["fixed_s"] or 0) > 0:
                print(why_static(c_step, s_step, cont, work / ceiling if ceiling else None))
    if "engine continuous, SDPA decode" in runs:
        print(f"C++ decode kernel / gather + SDPA, end to end: {runs['engine continuous, SDPA decode'] / cont:.2f}×")
    for name, what in (("engine continuous, SDPA prefill", "prefill attention as chosen at load / SDPA"),
                       ("engine continuous, torch reductions", "C++ row reductions / torch's"),
                       ("engine continuous, no few-row kernel", "few-row linear kernel / none")):
        if name in runs:
            by_run = [s / c for c, s in zip(pairs["engine continuous"], others[name], strict=True)]
            print(f"{what}, end to end: {runs[name] / cont:.2f}× faster"
                  + (f"; run by run {', '.join(f'{r:.2f}' for r in by_run)}" if repeats > 1 else ""))
    if best_hf:
        print(f"continuous / best transformers: {best_hf / cont:.2f}× (target ≥ 3)")
    if len(pairs["vLLM CPU offline"]) == len(pairs["engine continuous"]):
        ratios = [v / e for e, v in zip(pairs["engine continuous"], pairs["vLLM CPU offline"], strict=True)]
        print(f"continuous / vLLM CPU, both {dtype}: {runs['vLLM CPU offline'] / cont:.2f}× (aim ≥ 1)"
              + (f"; run by run {', '.join(f'{r:.2f}' for r in ratios)}" if repeats > 1 else ""))
    return runs


if __name__ == "__main__":
    main()
