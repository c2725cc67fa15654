#!/usr/bin/env bash
# One CUDA check of the engine: kernel tests (incl. bf16), attention timings against torch and the
# bandwidth floor, engine throughput (small + Qwen2.5-0.5B-shaped), a short llmbench sweep.
# Needs only the repository and the machine's own PyTorch/Triton; sections whose Python packages are
# missing are recorded as skipped. Writes gpu_check.json (or $1) and prints a short table last.
#   scripts/gpu_check.sh [OUT.json] [--dry-run]   (--dry-run: CPU, Triton interpreter, tiny shapes)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu_check.json}"
shift || true
exec "${PYTHON:-python3}" scripts/gpu_check.py --out "$OUT" "$@"
