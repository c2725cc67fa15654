"""The engine's C++ kernels for the CPU, one library built on first use: the paged decode attention
(`cpu_decode_attention.cpp`), a Llama block's elementwise layers and its K/V cache write (`cpu_layers.cpp`), and
the tiled prefill's causal softmax and greedy sampling's argmax (`cpu_row_reductions.cpp`), and linear layers for
steps of few rows (`cpu_gemv.cpp`).

Gathering pages into a padded tensor and calling SDPA reads every cached K/V row three times (gather,
write, SDPA) and pads to the longest context; the C++ kernel reads each row once, in place, which is what
vLLM's CPU backend does too, as it also fuses RMSNorm, rotary and SiLU * up into one pass each. The library is
compiled with the machine's C++ compiler through `torch.utils.cpp_extension` (kept under
`$TORCH_EXTENSIONS_DIR`, by default `~/.cache/torch_extensions`); where that fails the engine keeps the torch
path (gather + SDPA, torch's elementwise ops) and says why.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCES = [Path(__file__).with_name(name)
           for name in ("cpu_decode_attention.cpp", "cpu_layers.cpp", "cpu_row_reductions.cpp", "cpu_gemv.cpp")]
# in the build's hash: a change rebuilds
HEADERS = [Path(__file__).with_name(name) for name in ("cpu_decode_bf16.h", "cpu_float_rows.h")]
WIDTH = 16  # head_dim must be a multiple of the kernel's vector width
_STATE: dict[str, str | bool] = {}
# -ffast-math lets the compiler vectorize exp and reassociate the dot products (1.7x on a first version)
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffast-math"]
STALE_LOCK_SECONDS = 600


def available() -> bool:
    """Build (once per machine and source version) and load the kernel; False, with the reason in `status()`,
    where it cannot be built."""
    if "ok" not in _STATE:
        try:
            _load()
            _STATE.update(ok=True, why="C++ paged decode kernel")
        except Exception as err:  # no compiler, no ninja, a build error: keep the torch path
            _STATE.update(ok=False, why=f"C++ kernel unavailable: {str(err).strip().splitlines()[-1]}")
            log.warning("CPU decode attention: %s", _STATE["why"])
    return bool(_STATE["ok"])


def loaded() -> bool:
    """Whether the library is already loaded in this process (by an engine that chose one of its kernels): the
    row reductions use it then, and never build it themselves."""
    return _STATE.get("ok") is True


def build_directory() -> Path:
    """Where this source, built with these flags for this torch and Python, lives."""
    built_for = f"{CFLAGS} torch {torch.__version__} python {sys.version_info[:2]}"
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in SOURCES + HEADERS) + built_for.encode()).hexdigest()[:12]
    name = f"llmbench_cpu_attention_{torch.backends.cpu.get_cpu_capability().lower()}_{digest}"
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions") / name


def _load() -> None:
    """The library's name carries a hash of the source, flags and torch/Python versions, so a built one is
    loaded directly: no build lock is taken, which a process killed while holding it (a server stopped during
    start-up) would leave behind for every later engine to wait on. A lock older than any build is such a
    leftover and is removed."""
    import ninja  # the PyPI package; its binary may not be on PATH when the venv is not activated
    from torch.utils import cpp_extension

    build = build_directory()
    name = build.name
    library = build / f"{name}.so"
    if library.exists():
        torch.ops.load_library(str(library))
        return
    build.mkdir(parents=True, exist_ok=True)
    lock = build / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
        lock.unlink(missing_ok=True)
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    cpp_extension.load(name=name, sources=[str(p) for p in SOURCES], extra_cflags=CFLAGS, extra_ldflags=["-fopenmp"],
                       build_directory=str(build), is_python_module=False, verbose=False)


def status() -> str:
    return str(_STATE.get("why", "not built"))


def has_amx() -> bool:
    """Whether the built library scores bf16 caches with AMX tiles (compiled for them and allowed by the OS)."""
    return available() and torch.ops.llmbench_cpu.has_amx()


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                 seq_lens: torch.Tensor, scale: float, v_scale: float = 1.0, amx: bool = True) -> torch.Tensor:
    """q [B, H, D] -> [B, H, D] in q's dtype, attending to seq_lens[b] cached tokens through block_tables[b].
    `amx`: score bf16 caches with AMX tiles where the CPU and the build have them (False: the vector path)."""
    q = q if q.stride(-1) == 1 else q.contiguous()
    return torch.ops.llmbench_cpu.paged_decode(q, k_cache, v_cache, block_tables.int().contiguous(),
                                               seq_lens.int().contiguous(), scale, v_scale, amx)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.ops.llmbench_cpu.rms_norm(x, weight, eps)


def add_rms_norm_(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual += x (rounded to their dtype), then x = RMSNorm(residual) (contiguous [T, H] both)."""
    torch.ops.llmbench_cpu.add_rms_norm_(x, residual, weight, eps)


def store_kv_(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              slots: torch.Tensor) -> None:
    """k/v [T, KVH, D] into caches [blocks, block_size, KVH, D] of their dtype at slots [T] (-1: skipped)."""
    torch.ops.llmbench_cpu.store_kv_(k, v, k_cache, v_cache, slots)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[..., 2I] (gate then up) -> silu(gate) * up [..., I]."""
    return torch.ops.llmbench_cpu.silu_and_mul(gate_up)


def causal_softmax_(scores: torch.Tensor, first: int) -> None:
    """Softmax in place over the last dimension of contiguous [B, rows, keys] scores, row r seeing keys 0..first + r
    (the rest become 0)."""
    torch.ops.llmbench_cpu.causal_softmax_(scores, first)


def argmax_last(x: torch.Tensor) -> torch.Tensor:
    """[rows, cols] -> the first index of each row's maximum (int64), as torch's max(dim=-1) gives it."""
    return torch.ops.llmbench_cpu.argmax_last(x)


def gemv_width(dtype: torch.dtype) -> int:
    """Output columns per vector of the few-row linear kernel for `dtype` in this build (0: none)."""
    return int(torch.ops.llmbench_cpu.gemv_width(dtype)) if available() else 0


def gemv(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
    """x [M, K] (contiguous) times the weight packed by `engine.layers.gemv_linear.pack` -> [M, n]."""
    return torch.ops.llmbench_cpu.gemv(x, packed, n)


def rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate q [T, H, D] and k [T, KVH, D] in place (views of the qkv output are fine)."""
    torch.ops.llmbench_cpu.rotary_(q, k, positions, cos, sin)
