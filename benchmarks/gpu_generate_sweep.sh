#!/usr/bin/env bash
# The memory wall at inference on one GPU (issue 17): generate sweeps, resumable.
#   bash benchmarks/gpu_generate_sweep.sh OUTDIR [SWEEPS]
# SWEEPS (default ./sweeps) holds the sweep folders gen-gpt2s and gen-gpt2m; folders already
# there (e.g. carried from an earlier call, traces left out) are resumed: done rows are not
# run again, the sweep's measured ceilings (sweep.json) are reused.
# gpt2-small and gpt2-medium, bf16, SDPA, 32 new tokens per generation, --block-size 8192:
# the batch axis 1..1024 at context 1024 and the context axis 128..8192 at batch 8
# (17 configurations per model; benchmarks/gpu_generate_sweep.py has the plan).
# Per configuration: a collect subprocess (~3-5 s of start-up: torch, CUDA, the model),
# 1 warm-up + 3 timed generations and a profiler warm-up + a profiled one, then parse +
# classify of its trace (4 decode steps recorded). Measured on an H200: ~14 s a
# configuration for gpt2-small, ~22 s for gpt2-medium, more at batch 512-1024 (a prefill
# of 1024 x 992 tokens; gpt2-medium's KV cache, 96 GiB at batch 1024, is read every
# step). All of it: ~4 min for gpt2-small, ~7 min for gpt2-medium.
# One call sweeps for at most CALL_S seconds (default 420), gpt2-small first (at most
# 260 s of them), gpt2-medium the rest; no configuration starts when the one before it,
# twice over, would not fit (benchmarks/gpu_generate_sweep.py run --budget). With the
# analysis (~4 s a sweep) a call stays under ~8 minutes; run it again (same SWEEPS) until
# the summary says "17 of 17 planned configurations ran": two calls from scratch.
# Prints and writes OUTDIR/summary.txt: per model the measured ceilings; per batch and per
# context the time per step and its p10-p90, the GPU's busy time per step (trace), what
# limits the step (launch/host-bound when the GPU idles >= 20 % of it), the decode model's
# bandwidth over the step and over the GPU's busy time (% of the measured copy ceiling),
# tokens/s, the kernels' bandwidth, the decode GEMMs' time and % of the matmul roof, the
# roofline time, the peak; the measured crossover (fit of the GEMMs' GPU time) against the
# predicted one, the KV read's bandwidth, the capacity walls, the findings.
# OUTDIR/sweeps.tar.gz: the sweep folders (tables, decode.csv, fits, findings, report/,
# TensorBoard, each run's manifest) without the traces; OUTDIR/*.log: each step's output.
set -u
STEP_TAIL=4
source "$(dirname "$0")/gpu_common.sh"
SWEEPS=${2:-sweeps}
CALL_S=${CALL_S:-420}
PY="python3 $(dirname "$0")/gpu_generate_sweep.py"
T0=$(date +%s)
sweep() {  # sweep NAME PRESET BUDGET_S
  STEP_TIMEOUT=$(( $3 + 150 )) step "sweep-$1" $PY run "$2" "$SWEEPS/$1" --budget "$3"
  STEP_TIMEOUT=90 step "analyse-$1" $PY analyse "$SWEEPS/$1"
}
sweep gen-gpt2s gpt2-small $(( CALL_S < 260 ? CALL_S : 260 ))
LEFT=$(( CALL_S - ($(date +%s) - T0) ))
sweep gen-gpt2m gpt2-medium $(( LEFT > 60 ? LEFT : 60 ))
$PY summary "$SWEEPS/gen-gpt2s" "$SWEEPS/gen-gpt2m" | tee "$OUT/summary.txt"
tar --exclude='*.pt.trace.json.gz' --exclude='*.profiler_flops.json.gz' \
  -czf "$OUT/sweeps.tar.gz" -C "$(dirname "$SWEEPS")" "$(basename "$SWEEPS")"
ls -la "$OUT"   # steps.txt, gpu.txt, summary.txt, sweeps.tar.gz, *.log
