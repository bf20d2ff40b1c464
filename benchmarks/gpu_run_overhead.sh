#!/usr/bin/env bash
# What `tracekit run` adds to the unprofiled step of the three user scripts, on a CUDA
# machine: paired rounds of benchmarks/run_overhead.py (the script's own timing alone,
# against `tracekit run` with the script timing itself too), then each of tracekit's hooks'
# host time per step on GPT-2 (--hooks).
#   bash benchmarks/gpu_run_overhead.sh OUTDIR [ROUNDS]      (default 3: ~3-4 min on an H200)
set -u
ROUNDS=${2:-3}
source "$(dirname "$0")/gpu_common.sh"
B="python3 benchmarks/run_overhead.py --rounds $ROUNDS --steps 40"
HF=benchmarks/user_scripts/hf_causal_lm_train.py
STEP_TAIL=$((ROUNDS + 6)) step overhead-resnet50 $B -- python benchmarks/user_scripts/resnet50_train.py
STEP_TAIL=$((ROUNDS + 6)) step overhead-gpt2 $B -- python $HF
STEP_TAIL=$((ROUNDS + 6)) step overhead-llama $B -- python $HF --model llama
STEP_TAIL=20 step hooks-gpt2 python3 benchmarks/run_overhead.py --hooks --steps 40 -- python $HF --iters 60
