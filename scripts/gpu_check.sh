#!/usr/bin/env bash
# One CUDA check of the engine, under 8 minutes: kernel tests (incl. bf16), attention timings against torch
# and the bandwidth floor, engine throughput on nano-vllm's workload (Qwen2.5-0.5B-shaped + small; graphs and
# eager, continuous and static 64, transformers generate), a short llmbench sweep. Each section runs in its own
# bounded subprocess; sections whose packages are missing are recorded as skipped. Writes gpu_check.json (or
# $1) after every section and prints a short table last.
#   scripts/gpu_check.sh [OUT.json] [--dry-run]   (--dry-run: CPU, Triton interpreter, tiny shapes)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu_check.json}"
shift || true
exec "${PYTHON:-python3}" scripts/gpu_check.py --out "$OUT" "$@"
